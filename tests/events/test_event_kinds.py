"""Each kind of event raised where it happens, through the API and the admin console alike, with the
data docs/webhooks.md lists, never a secret, and only for a change that was committed."""

import pytest
from django.test import Client

from apps.events.models import Event
from apps.outbox.outbox import outbox
from tests.factories import UserFactory, create_provider_key

pytestmark = pytest.mark.django_db(transaction=True)


def written(organization, kind: str) -> list[Event]:
    assert outbox().flush()
    return list(Event.objects.filter(organization=organization, type=kind))


def test_a_key_created_and_revoked_through_the_api_raises_both_events(session_client, organization):
    created = session_client.post("/api/v1/api-keys", {"name": "ci"}, format="json").json()

    [event] = written(organization, "api_key.created")
    assert event.data == {
        "api_key_id": created["id"],
        "name": "ci",
        "key_prefix": created["key_prefix"],
        "team_id": None,
    }
    assert created["key"] not in str(event.data)

    assert session_client.delete(f"/api/v1/api-keys/{created['id']}").status_code in (200, 204)
    [revoked] = written(organization, "api_key.revoked")
    assert revoked.data["api_key_id"] == created["id"]
    assert session_client.delete(f"/api/v1/api-keys/{created['id']}").status_code in (200, 204)
    assert len(written(organization, "api_key.revoked")) == 1  # revoking again changes nothing


def test_a_key_created_in_the_admin_console_raises_the_event(organization):
    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))

    browser.post(
        "/admin/keys/apikey/add/",
        {"organization": organization.id, "name": "from the console", "permissions": ["proxy:chat"]},
    )

    [event] = written(organization, "api_key.created")
    assert event.data["name"] == "from the console"


def test_a_refused_creation_raises_nothing(session_client, organization):
    refused = session_client.post(
        "/api/v1/api-keys", {"name": "x", "budget": {"amount_usd": "-1"}}, format="json"
    )

    assert refused.status_code == 400
    assert written(organization, "api_key.created") == []


def test_a_rotated_provider_key_raises_the_event_without_either_secret(session_client, organization):
    key = create_provider_key(organization, secret="sk-old-secret-1111")

    response = session_client.post(
        f"/api/v1/provider-keys/{key.id}/rotate", {"key": "sk-new-secret-2222"}, format="json"
    )

    assert response.status_code == 200
    [event] = written(organization, "provider_key.rotated")
    assert event.data == {"provider_key_id": str(key.id), "provider": key.provider}
