"""The management API's side of issue 19, finding 3: model allow-lists on the organization, teams and
API keys, and the organization's default price for unpriced models, read and written with each
object's own GET/PATCH (and creation), validated in its service, each write bumping the
configuration generation; an outsider organization sees and changes none of it."""

import pytest

from tests.factories import TeamFactory, create_api_key
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

ORG = "/api/v1/organizations/current"


def settings_of(client) -> dict:
    response = client.get(ORG)
    assert response.status_code == 200
    return response.json()["settings"]


def test_the_organizations_allowed_models_and_default_price_are_read_and_written(
    session_client, organization, django_capture_on_commit_callbacks
):
    assert settings_of(session_client)["allowed_models"] == []
    assert settings_of(session_client)["default_price"] is None
    changes = {
        "allowed_models": ["fast", "openai/gpt-4o*", "fast"],
        "default_price": {"input_per_mtok": "5.00", "output_per_mtok": "15"},
    }
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(ORG, {"settings": changes}, format="json")
    assert response.status_code == 200, response.content
    settings = response.json()["settings"]
    assert settings["allowed_models"] == ["fast", "openai/gpt-4o*"]  # a repeat is dropped
    assert settings["default_price"] == {"input_per_mtok": "5.000000", "output_per_mtok": "15.000000"}
    response = session_client.patch(
        ORG, {"settings": {"allowed_models": None, "default_price": None}}, format="json"
    )
    assert response.json()["settings"]["allowed_models"] == []
    assert response.json()["settings"]["default_price"] is None


@pytest.mark.parametrize(
    "value, field",
    [
        ("fast", "settings.allowed_models"),
        (["open ai/gpt-4o"], "settings.allowed_models[0]"),
        (["/gpt-4o"], "settings.allowed_models[0]"),
        ([""], "settings.allowed_models"),
        ([7], "settings.allowed_models"),
    ],
)
def test_a_malformed_allow_list_is_a_400_naming_the_field(session_client, value, field):
    response = session_client.patch(ORG, {"settings": {"allowed_models": value}}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(name.startswith(field) for name in error["fields"]), error


@pytest.mark.parametrize(
    "value",
    [
        {"input_per_mtok": "5"},
        {"input_per_mtok": 5, "output_per_mtok": "1"},
        {"input_per_mtok": "-1", "output_per_mtok": "1"},
        {"input_per_mtok": "1", "output_per_mtok": "1", "cached": "1"},
        "5.00",
    ],
)
def test_a_malformed_default_price_is_a_400(session_client, value):
    response = session_client.patch(ORG, {"settings": {"default_price": value}}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"
    assert settings_of(session_client)["default_price"] is None


def test_a_member_cannot_change_them(client_for, organization):
    member = client_for(organization, "member")
    response = member.patch(ORG, {"settings": {"allowed_models": ["fast"]}}, format="json")
    assert response.status_code == 403


def test_a_teams_allowed_models_are_set_at_creation_and_changed(
    session_client, organization, django_capture_on_commit_callbacks
):
    response = session_client.post(
        "/api/v1/teams", {"name": "Research", "allowed_models": ["anthropic/claude-*"]}, format="json"
    )
    assert response.status_code == 201, response.content
    team = response.json()
    assert team["allowed_models"] == ["anthropic/claude-*"]
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(
            f"/api/v1/teams/{team['id']}", {"allowed_models": ["fast"]}, format="json"
        )
    assert response.json()["allowed_models"] == ["fast"]
    bad = session_client.patch(f"/api/v1/teams/{team['id']}", {"allowed_models": ["a b"]}, format="json")
    assert bad.status_code == 400
    assert session_client.get(f"/api/v1/teams/{team['id']}").json()["allowed_models"] == ["fast"]


def test_a_keys_allowed_models_are_set_at_creation_and_changed(
    session_client, organization, django_capture_on_commit_callbacks
):
    response = session_client.post(
        "/api/v1/api-keys", {"name": "ci", "allowed_models": ["fast", "openai/gpt-4o-mini"]}, format="json"
    )
    assert response.status_code == 201, response.content
    key = response.json()
    assert key["allowed_models"] == ["fast", "openai/gpt-4o-mini"]
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(
            f"/api/v1/api-keys/{key['id']}", {"allowed_models": []}, format="json"
        )
    assert response.status_code == 200
    assert response.json()["allowed_models"] == []


def test_an_outsider_neither_sees_nor_changes_them(client_for, outsider, organization):
    team = TeamFactory(organization=organization)
    api_key, _ = create_api_key(organization, allowed_models=["fast"])
    stranger = client_for(outsider.organization, "owner")
    assert stranger.get(f"/api/v1/teams/{team.id}").status_code == 404
    assert (
        stranger.patch(f"/api/v1/api-keys/{api_key.id}", {"allowed_models": []}, format="json").status_code
        == 404
    )
    stranger.patch(ORG, {"settings": {"allowed_models": ["x"], "default_price": None}}, format="json")
    organization.refresh_from_db()
    api_key.refresh_from_db()
    assert organization.allowed_models == [] and api_key.allowed_models == ["fast"]
