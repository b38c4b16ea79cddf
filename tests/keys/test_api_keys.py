"""/api/v1/api-keys: creating, listing and revoking the organization's proxy keys."""

import hashlib
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from apps.keys.models import ApiKey
from tests.conftest import login
from tests.factories import TeamFactory, create_api_key
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/api-keys"
LISTED_FIELDS = {
    "id",
    "name",
    "key_prefix",
    "permissions",
    "team_id",
    "allowed_data_regions",
    "allowed_models",
    "is_active",
    "status",
    "expires_at",
    "budget",
    "rate_limits",
    "created_at",
    "last_used_at",
}


def assert_invalid_field(response, field: str) -> None:
    error = assert_error(response, 400, "validation_error")
    assert error["type"] == "invalid_request_error"
    named = [name for name in error["fields"] if name == field or name.startswith((f"{field}.", f"{field}["))]
    assert named, error["fields"]


def signed_in(client, email: str):
    tokens = login(client, email)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    return client


def listed(client) -> dict[str, dict]:
    response = client.get(URL)
    assert response.status_code == 200
    return {key["id"]: key for key in response.json()["results"]}


# --- create ------------------------------------------------------------------------------------


def test_it_creates_a_key_and_shows_the_secret_once(session_client):
    response = session_client.post(URL, {"name": "ci"}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert {"id", "key", "key_prefix", "permissions", "is_active", "team_id", "created_at", "warning"} <= set(
        body
    )
    uuid.UUID(body["id"])
    assert body["key"].startswith("sk_live_")
    assert len(body["key"]) == 51
    assert body["key_prefix"] == body["key"][:12]
    assert body["permissions"] == ["proxy:llm"]
    assert body["is_active"] is True
    assert body["status"] == "active"
    assert body["team_id"] is None
    assert body["expires_at"] is None
    assert body["created_at"].endswith("Z")
    assert "shown only once" in body["warning"]


def test_every_key_is_different(session_client):
    first = session_client.post(URL, {"name": "a"}, format="json").json()
    second = session_client.post(URL, {"name": "b"}, format="json").json()

    assert first["key"] != second["key"]
    assert first["id"] != second["id"]


def test_it_stores_only_the_prefix_and_a_sha256_digest_of_the_key(session_client):
    body = session_client.post(URL, {"name": "ci"}, format="json").json()

    row = ApiKey.objects.filter(pk=body["id"]).values().get()
    assert row["key_digest"] == hashlib.sha256(body["key"].encode()).hexdigest()
    assert row["key_prefix"] == body["key"][:12]
    assert not [column for column, value in row.items() if body["key"] in str(value)]


def test_it_creates_a_key_with_chosen_permissions_team_and_expiry(session_client, team):
    expires_at = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    request = {
        "name": "embedder",
        "permissions": ["proxy:embeddings", "proxy:models"],
        "team_id": str(team.id),
        "expires_at": expires_at.isoformat(),
    }

    body = session_client.post(URL, request, format="json").json()

    assert sorted(body["permissions"]) == ["proxy:embeddings", "proxy:models"]
    assert body["team_id"] == str(team.id)
    assert body["expires_at"] == expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert listed(session_client)[body["id"]]["team_id"] == str(team.id)


def test_an_admin_can_create_and_revoke_keys(client_for, organization):
    admin = client_for(organization, "admin")

    created = admin.post(URL, {"name": "by admin"}, format="json")
    revoked = admin.delete(f"{URL}/{created.json()['id']}")

    assert created.status_code == 201
    assert revoked.status_code == 204


# --- list and retrieve -------------------------------------------------------------------------


def test_the_list_never_shows_the_secret_and_shows_the_status(session_client):
    created = session_client.post(URL, {"name": "ci"}, format="json").json()

    response = session_client.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    [key] = body["results"]
    assert set(key) == LISTED_FIELDS
    assert key["status"] == "active"
    assert key["key_prefix"] == created["key"][:12]
    assert created["key"] not in response.content.decode()


def test_one_key_can_be_read_without_its_secret(session_client):
    created = session_client.post(URL, {"name": "ci"}, format="json").json()

    response = session_client.get(f"{URL}/{created['id']}")

    assert response.status_code == 200
    assert set(response.json()) == LISTED_FIELDS | {"usage"}  # the detail adds the key's usage
    assert created["key"] not in response.content.decode()


def test_the_list_never_shows_the_outsiders_keys(session_client, outsider):
    theirs, _ = create_api_key(outsider.organization)
    mine = session_client.post(URL, {"name": "mine"}, format="json").json()

    assert list(listed(session_client)) == [mine["id"]]
    assert str(theirs.id) not in session_client.get(URL).content.decode()


def test_the_list_is_paginated_by_cursor_newest_first(session_client, outsider):
    create_api_key(outsider.organization)
    older = session_client.post(URL, {"name": "older"}, format="json").json()
    newer = session_client.post(URL, {"name": "newer"}, format="json").json()

    first = session_client.get(URL, {"limit": 1}).json()
    second = session_client.get(first["next"]).json()

    assert [key["id"] for key in first["results"]] == [newer["id"]]
    assert [key["id"] for key in second["results"]] == [older["id"]]
    assert second["next"] is None


def test_an_expired_key_is_listed_as_expired(session_client, owner, api_client):
    expires_at = timezone.now() + timedelta(hours=1)
    created = session_client.post(URL, {"name": "short", "expires_at": expires_at.isoformat()}, format="json")
    assert listed(session_client)[created.json()["id"]]["status"] == "active"

    with time_machine.travel(expires_at + timedelta(seconds=1), tick=False):
        # The old session has expired by then too; sign in again at the later time.
        key = listed(signed_in(api_client, owner.user.email))[created.json()["id"]]

    assert key["status"] == "expired"


# --- revoke ------------------------------------------------------------------------------------


def test_revoking_is_idempotent_and_the_key_stays_listed_as_revoked(session_client):
    created = session_client.post(URL, {"name": "ci"}, format="json").json()

    first = session_client.delete(f"{URL}/{created['id']}")
    second = session_client.delete(f"{URL}/{created['id']}")

    assert first.status_code == 204
    assert second.status_code == 204
    assert first.content == b""
    key = listed(session_client)[created["id"]]
    assert key["status"] == "revoked"
    assert key["is_active"] is False


def test_it_answers_404_for_the_outsiders_key_and_leaves_it_active(session_client, api_client, outsider):
    theirs, _ = create_api_key(outsider.organization)

    read = session_client.get(f"{URL}/{theirs.id}")
    revoke = session_client.delete(f"{URL}/{theirs.id}")

    assert_error(read, 404, "not_found")
    assert_error(revoke, 404, "not_found")
    assert read.json() == revoke.json()
    assert listed(signed_in(api_client, outsider.user.email))[str(theirs.id)]["status"] == "active"


def test_it_answers_404_for_a_key_that_does_not_exist(session_client):
    assert_error(session_client.delete(f"{URL}/{uuid.uuid4()}"), 404, "not_found")
    assert_error(session_client.get(f"{URL}/not-a-uuid"), 404, "not_found")


# --- roles -------------------------------------------------------------------------------------


def test_a_member_can_list_keys_but_not_create_or_revoke_them(client_for, organization, api_key):
    key, _ = api_key
    member = client_for(organization, "member")

    listing = member.get(URL)
    create = member.post(URL, {"name": "sneaky"}, format="json")
    revoke = member.delete(f"{URL}/{key.id}")

    assert listing.status_code == 200
    assert [k["id"] for k in listing.json()["results"]] == [str(key.id)]
    assert_error(create, 403, "permission_denied")
    assert_error(revoke, 403, "permission_denied")
    assert listed(member)[str(key.id)]["status"] == "active"


# --- bad input ---------------------------------------------------------------------------------


def test_it_rejects_a_malformed_json_body(session_client):
    response = session_client.post(URL, data='{"name": ', content_type="application/json")

    error = assert_error(response, 400, "parse_error")
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": ["ci"]}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"name": "ci", "permissions": "proxy:llm"}, "permissions"),
        ({"name": "ci", "permissions": []}, "permissions"),
        ({"name": "ci", "permissions": ["proxy:admin"]}, "permissions"),
        ({"name": "ci", "permissions": [None]}, "permissions"),
        ({"name": "ci", "expires_at": "tomorrow"}, "expires_at"),
        ({"name": "ci", "expires_at": 1893456000}, "expires_at"),
        ({"name": "ci", "team_id": "not-a-uuid"}, "team_id"),
        ({"name": "ci", "team_id": 7}, "team_id"),
        ({"name": "ci", "team_id": str(uuid.UUID(int=1))}, "team_id"),
    ],
)
def test_it_rejects_bad_input_naming_the_field(session_client, body, field):
    response = session_client.post(URL, body, format="json")

    assert_invalid_field(response, field)
    assert listed(session_client) == {}


def test_it_rejects_a_name_that_is_not_a_string(session_client):
    response = session_client.post(URL, {"name": 5}, format="json")

    assert_invalid_field(response, "name")


def test_an_error_inside_a_list_names_the_item_by_its_index(session_client):
    response = session_client.post(
        URL, {"name": "ci", "permissions": ["proxy:llm", "proxy:admin"]}, format="json"
    )

    error = assert_error(response, 400, "validation_error")
    assert set(error["fields"]) == {"permissions[1]"}


def test_it_rejects_an_expiry_in_the_past(session_client):
    past = timezone.now() - timedelta(minutes=1)

    response = session_client.post(URL, {"name": "ci", "expires_at": past.isoformat()}, format="json")

    assert_invalid_field(response, "expires_at")


def test_it_rejects_a_team_of_another_organization(session_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)

    response = session_client.post(URL, {"name": "ci", "team_id": str(their_team.id)}, format="json")

    assert_invalid_field(response, "team_id")
    assert not ApiKey.objects.filter(team=their_team).exists()


def test_it_answers_the_outsiders_team_exactly_like_a_team_that_does_not_exist(session_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)

    theirs = session_client.post(URL, {"name": "ci", "team_id": str(their_team.id)}, format="json")
    unknown = session_client.post(URL, {"name": "ci", "team_id": str(uuid.uuid4())}, format="json")

    assert theirs.json() == unknown.json()


def test_it_refuses_a_form_encoded_body(session_client):
    response = session_client.post(URL, data="name=ci", content_type="application/x-www-form-urlencoded")

    assert_error(response, 415, "unsupported_media_type")
    assert listed(session_client) == {}


def test_it_refuses_put_on_a_key(session_client, api_key):
    key, _ = api_key

    response = session_client.put(f"{URL}/{key.id}", {"name": "renamed"}, format="json")

    assert_error(response, 405, "method_not_allowed")


def test_an_unknown_path_under_the_api_is_a_json_404(session_client):
    for path in ("/api/v1/does-not-exist", f"{URL}/", "/api/v2/api-keys"):
        response = session_client.get(path)

        error = assert_error(response, 404, "not_found")
        assert error["type"] == "not_found_error"
        assert b"<html" not in response.content.lower()


@pytest.mark.parametrize("method", ["post", "patch", "put", "delete"])
@pytest.mark.parametrize("path", ["/api/v1/does-not-exist", "/api/v1/api-keys/x/y", "/api/v2/api-keys"])
def test_a_write_to_an_unknown_path_under_the_api_is_a_json_404_not_a_csrf_page(method, path):
    # A browser-like client: CSRF is enforced, and a session cookie would not help either.
    client = Client(enforce_csrf_checks=True)

    response = getattr(client, method)(path, {"name": "x"}, content_type="application/json")

    error = assert_error(response, 404, "not_found")
    assert error == {"type": "not_found_error", "code": "not_found", "message": f"No endpoint at {path}."}


def test_a_forged_cursor_is_a_404_not_a_500(session_client):
    import base64

    forged = base64.b64encode(b"p=not-a-time&r=0").decode()
    response = session_client.get(URL, {"cursor": forged})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
