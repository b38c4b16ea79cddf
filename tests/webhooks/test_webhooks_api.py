"""/api/v1/organizations/current/webhooks: create, read, change, delete and roll the secret; what a
webhook URL and its event kinds may be; who may do what; nothing of another organization's."""

import json

import pytest

from apps.core import crypto
from apps.webhooks.models import Webhook
from tests.factories import MembershipFactory
from tests.webhooks.conftest import WEBHOOKS, create_webhook

pytestmark = pytest.mark.django_db


def test_it_creates_a_webhook_and_shows_its_secret_once(session_client, organization):
    created = create_webhook(
        session_client,
        "https://127.0.0.1:8443/hooks",
        events=["budget.exceeded", "policy.blocked", "budget.exceeded"],
        description="alerts",
    )

    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) == 6 + 43
    assert created["events"] == ["budget.exceeded", "policy.blocked"]
    assert created["is_active"] is True and created["description"] == "alerts"
    webhook = Webhook.objects.get(id=created["id"])
    assert webhook.organization == organization
    assert secret not in webhook.secret_encrypted and crypto.decrypt(webhook.secret_encrypted) == secret
    # Never again: not in the list, the webhook, a change, a test, or the delivery history.
    answers = [
        session_client.get(WEBHOOKS),
        session_client.get(f"{WEBHOOKS}/{webhook.id}"),
        session_client.patch(f"{WEBHOOKS}/{webhook.id}", {"description": "changed"}, format="json"),
        session_client.get(f"{WEBHOOKS}/deliveries"),
    ]
    for answer in answers:
        assert answer.status_code == 200
        assert secret not in answer.content.decode()
        assert "secret" not in json.dumps(answer.json()).replace("previous_secret_expires_at", "")


def test_events_default_to_every_kind_and_a_star_means_every_kind(session_client):
    assert create_webhook(session_client, "https://127.0.0.1/a")["events"] == ["*"]
    assert create_webhook(session_client, "https://127.0.0.1/b", events=["*", "budget.exceeded"])[
        "events"
    ] == ["*"]


@pytest.mark.parametrize(
    "url, field_message",
    [
        ("http://127.0.0.1/hook", "https://"),
        ("ftp://127.0.0.1/hook", "https://"),
        ("https://user:pass@127.0.0.1/hook", "credentials"),
        ("https://127.0.0.1/hook#part", "fragment"),
        ("https://127.0.0.1:99999/hook", "not a valid URL"),
        ("https:///nohost", "host"),
        # Link-local and metadata addresses, whatever the setting.
        ("https://169.254.169.254/latest/meta-data", "link-local or a metadata service"),
        ("https://[fe80::1]/hook", "link-local or a metadata service"),
        ("https://[::ffff:169.254.169.254]/hook", "link-local or a metadata service"),
        ("https://100.100.100.200/hook", "metadata"),
        ("https://name.invalid/hook", "could not be resolved"),
    ],
)
def test_it_refuses_a_url_it_must_not_send_to(session_client, url, field_message):
    response = session_client.post(WEBHOOKS, {"url": url, "events": ["*"]}, format="json")

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field_message in error["fields"]["url"][0]
    assert "pass" not in error["message"]
    assert not Webhook.objects.exists()


def test_a_url_resolving_to_loopback_is_refused_unless_the_setting_allows_it(session_client, settings):
    settings.GATEWAY_ALLOW_PRIVATE_WEBHOOKS = False
    for url in ("https://localhost:8443/hook", "https://127.0.0.1/hook", "https://10.0.0.8/hook"):
        response = session_client.post(WEBHOOKS, {"url": url}, format="json")
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "webhook_address_refused"
        assert "GATEWAY_ALLOW_PRIVATE_WEBHOOKS" in error["fields"]["url"][0]

    settings.GATEWAY_ALLOW_PRIVATE_WEBHOOKS = True
    assert (
        create_webhook(session_client, "https://localhost:8443/hook")["url"] == "https://localhost:8443/hook"
    )


def test_a_changed_url_is_checked_as_at_creation(session_client):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")

    response = session_client.patch(
        f"{WEBHOOKS}/{webhook['id']}", {"url": "https://169.254.169.254/"}, format="json"
    )

    assert response.status_code == 400
    assert Webhook.objects.get(id=webhook["id"]).url == "https://127.0.0.1/hook"


@pytest.mark.parametrize(
    "events", [["budget.exploded"], [], "budget.exceeded", [7], ["policy.blocked", "nope"]]
)
def test_it_refuses_an_unknown_event_kind(session_client, events):
    response = session_client.post(
        WEBHOOKS, {"url": "https://127.0.0.1/hook", "events": events}, format="json"
    )

    assert response.status_code == 400
    assert all(field.startswith("events") for field in response.json()["error"]["fields"])
    assert not Webhook.objects.exists()


def test_it_changes_the_events_description_and_state(session_client):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")

    response = session_client.patch(
        f"{WEBHOOKS}/{webhook['id']}",
        {"events": ["api_key.created"], "description": "keys", "is_active": False},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["events"] == ["api_key.created"]
    assert response.json()["is_active"] is False
    assert session_client.get(f"{WEBHOOKS}/{webhook['id']}").json()["description"] == "keys"


def test_rolling_the_secret_shows_the_new_one_once_and_keeps_the_old_one_signing_for_a_day(
    session_client,
):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")

    response = session_client.post(f"{WEBHOOKS}/{webhook['id']}/roll-secret")

    assert response.status_code == 200
    rolled = response.json()
    assert rolled["secret"].startswith("whsec_") and rolled["secret"] != webhook["secret"]
    assert rolled["previous_secret_expires_at"] is not None
    stored = Webhook.objects.get(id=webhook["id"])
    assert stored.signing_secrets() == [rolled["secret"], webhook["secret"]]
    shown = session_client.get(f"{WEBHOOKS}/{webhook['id']}").content.decode()
    assert rolled["secret"] not in shown and webhook["secret"] not in shown


def test_deleting_a_webhook_removes_it(session_client):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")

    assert session_client.delete(f"{WEBHOOKS}/{webhook['id']}").status_code == 204
    assert session_client.get(f"{WEBHOOKS}/{webhook['id']}").status_code == 404


def test_members_read_and_only_admins_and_owners_write(session_client, organization, client_for):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")
    member = client_for(organization, "member")
    admin = client_for(organization, "admin")

    assert member.get(WEBHOOKS).status_code == 200
    assert member.get(f"{WEBHOOKS}/{webhook['id']}").status_code == 200
    assert member.post(WEBHOOKS, {"url": "https://127.0.0.1/x"}, format="json").status_code == 403
    assert member.patch(f"{WEBHOOKS}/{webhook['id']}", {"description": "x"}, format="json").status_code == 403
    assert member.post(f"{WEBHOOKS}/{webhook['id']}/roll-secret").status_code == 403
    assert member.post(f"{WEBHOOKS}/{webhook['id']}/test").status_code == 403
    assert member.delete(f"{WEBHOOKS}/{webhook['id']}").status_code == 403
    assert create_webhook(admin, "https://127.0.0.1/y")["secret"]


def test_another_organizations_webhooks_are_invisible(session_client, outsider, client_for):
    webhook = create_webhook(session_client, "https://127.0.0.1/hook")
    other = client_for(outsider.organization, "owner")
    create_webhook(other, "https://127.0.0.1/theirs")

    assert [row["url"] for row in session_client.get(WEBHOOKS).json()["results"]] == [
        "https://127.0.0.1/hook"
    ]
    for answer in (
        other.get(f"{WEBHOOKS}/{webhook['id']}"),
        other.patch(f"{WEBHOOKS}/{webhook['id']}", {"description": "x"}, format="json"),
        other.post(f"{WEBHOOKS}/{webhook['id']}/roll-secret"),
        other.post(f"{WEBHOOKS}/{webhook['id']}/test"),
        other.delete(f"{WEBHOOKS}/{webhook['id']}"),
    ):
        assert answer.status_code == 404
    assert Webhook.objects.get(id=webhook["id"]).description == ""


def test_the_admin_console_creates_through_the_services_and_shows_the_secret_once(client, organization):
    staff = MembershipFactory(organization=organization, role="owner").user
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client.force_login(staff)

    response = client.post(
        "/admin/webhooks/webhook/add/",
        {
            "organization": organization.pk,
            "url": "https://127.0.0.1/hook",
            "events": ["policy.blocked"],
            "is_active": "on",
        },
    )

    assert response.status_code == 200, response.content[:500]
    webhook = Webhook.objects.get()
    secret = crypto.decrypt(webhook.secret_encrypted)
    assert secret in response.content.decode()
    assert webhook.events == ["policy.blocked"]
    refused = client.post(
        "/admin/webhooks/webhook/add/",
        {"organization": organization.pk, "url": "https://169.254.169.254/", "events": ["*"]},
    )
    assert refused.status_code == 200 and "link-local" in refused.content.decode()
    assert Webhook.objects.count() == 1
    page = client.get(f"/admin/webhooks/webhook/{webhook.pk}/change/").content.decode()
    assert secret not in page
