"""/api/v1/organizations/current: the caller's organization, read by members and changed by admins."""

import pytest

from tests.conftest import login
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/organizations/current"


def test_it_shows_the_callers_organization_and_role(session_client, organization):
    response = session_client.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(organization.id)
    assert body["name"] == organization.name
    assert body["slug"] == organization.slug
    assert body["plan"] == organization.plan
    assert body["role"] == "owner"
    assert set(body["settings"]) >= {"log_bodies", "log_retention_days", "allowed_data_regions"}
    assert body["created_at"].endswith("Z")


def test_it_shows_each_caller_only_their_own_organization(session_client, api_client, organization, outsider):
    tokens = login(api_client, outsider.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")

    mine = session_client.get(URL).json()
    theirs = api_client.get(URL).json()

    assert mine["id"] == str(organization.id)
    assert theirs["id"] == str(outsider.organization_id)
    assert outsider.organization.name not in str(mine)


def test_it_persists_a_new_name_and_settings(session_client):
    changes = {
        "name": "Renamed Inc",
        "settings": {
            "log_bodies": "metadata",
            "log_retention_days": 90,
            "allowed_data_regions": ["eu", "us"],
        },
    }

    response = session_client.patch(URL, changes, format="json")

    assert response.status_code == 200
    assert response.json()["name"] == "Renamed Inc"
    read_back = session_client.get(URL).json()
    assert read_back["name"] == "Renamed Inc"
    # Settings not named in the change (limits, the cache) keep their defaults.
    assert read_back["settings"] == {
        **changes["settings"],
        "budget": None,
        "rate_limits": None,
        "limits_fail_mode": "open",
        "cache_enabled": True,
        "cache_ttl_seconds": 3600,
        "cache_any_temperature": False,
        "cache_semantic_enabled": False,
        "cache_semantic_threshold": 0.95,
        "cache_embedding_model": "",
        "allowed_models": [],
        "default_price": None,
    }


def test_a_partial_settings_patch_leaves_the_other_settings_alone(session_client):
    before = session_client.get(URL).json()["settings"]

    response = session_client.patch(URL, {"settings": {"log_retention_days": 7}}, format="json")

    assert response.status_code == 200
    after = session_client.get(URL).json()["settings"]
    assert after == {**before, "log_retention_days": 7}


def test_a_patch_never_changes_the_outsiders_organization(session_client, api_client, outsider):
    session_client.patch(URL, {"name": "Renamed", "settings": {"log_retention_days": 3}}, format="json")

    tokens = login(api_client, outsider.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    theirs = api_client.get(URL).json()
    assert theirs["name"] == outsider.organization.name
    assert theirs["settings"]["log_retention_days"] == outsider.organization.log_retention_days


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"log_bodies": "everything"}, "settings.log_bodies"),
        ({"log_retention_days": 0}, "settings.log_retention_days"),
        ({"log_retention_days": "forever"}, "settings.log_retention_days"),
        ({"allowed_data_regions": "eu"}, "settings.allowed_data_regions"),
        ({"allowed_data_regions": ["EU West!"]}, "settings.allowed_data_regions"),
    ],
)
def test_it_rejects_invalid_settings_naming_the_field(session_client, settings, field):
    before = session_client.get(URL).json()

    response = session_client.patch(URL, {"settings": settings}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert error["type"] == "invalid_request_error"
    assert any(name.startswith(field) for name in error["fields"]), error["fields"]
    assert session_client.get(URL).json() == before


def test_it_names_settings_when_settings_is_not_an_object(session_client):
    response = session_client.patch(URL, {"settings": "metadata"}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert set(error["fields"]) == {"settings"}


def test_it_rejects_a_blank_name(session_client):
    response = session_client.patch(URL, {"name": ""}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "name" in error["fields"]


def test_it_does_not_let_a_patch_change_the_plan(session_client, organization):
    assert organization.plan != "enterprise"

    response = session_client.patch(URL, {"plan": "enterprise"}, format="json")

    assert response.status_code in (200, 400)
    assert session_client.get(URL).json()["plan"] == organization.plan


def test_a_member_can_read_but_not_change_the_organization(client_for, organization):
    member = client_for(organization, "member")

    read = member.get(URL)
    change = member.patch(URL, {"name": "Taken over"}, format="json")

    assert read.status_code == 200
    assert read.json()["role"] == "member"
    error = assert_error(change, 403, "permission_denied")
    assert error["type"] == "permission_error"
    assert member.get(URL).json()["name"] == organization.name


def test_an_admin_can_change_the_organization(client_for, organization):
    admin = client_for(organization, "admin")

    response = admin.patch(URL, {"name": "Admin was here"}, format="json")

    assert response.status_code == 200
    assert response.json()["role"] == "admin"


def test_it_refuses_methods_other_than_get_and_patch(session_client):
    for response in (session_client.put(URL, {"name": "x"}, format="json"), session_client.delete(URL)):
        assert_error(response, 405, "method_not_allowed")
