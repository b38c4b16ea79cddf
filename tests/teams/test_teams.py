"""/api/v1/teams: the groups inside an organization that keys and usage are charged to."""

import uuid

import pytest

from tests.conftest import login
from tests.factories import TeamFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/teams"


def team_ids(client) -> list[str]:
    response = client.get(URL)
    assert response.status_code == 200
    return [team["id"] for team in response.json()["results"]]


def test_it_creates_a_team_with_a_slug_from_its_name(session_client):
    response = session_client.post(URL, {"name": "Research Lab"}, format="json")

    assert response.status_code == 201
    body = response.json()
    uuid.UUID(body["id"])
    assert body["name"] == "Research Lab"
    assert body["slug"] == "research-lab"
    assert body["allowed_data_regions"] == []
    assert body["created_at"].endswith("Z")
    assert team_ids(session_client) == [body["id"]]


def test_it_creates_a_team_with_a_chosen_slug_and_regions(session_client):
    request = {"name": "Europe", "slug": "eu-team", "allowed_data_regions": ["eu"]}

    body = session_client.post(URL, request, format="json").json()

    assert body["slug"] == "eu-team"
    assert body["allowed_data_regions"] == ["eu"]
    assert session_client.get(f"{URL}/{body['id']}").json() == body


def test_it_rejects_an_invalid_team(session_client):
    for body, field in (
        ({}, "name"),
        ({"name": "Ok", "slug": "not a slug!"}, "slug"),
        ({"name": "Ok", "allowed_data_regions": ["EU West!"]}, "allowed_data_regions"),
    ):
        error = assert_error(session_client.post(URL, body, format="json"), 400, "validation_error")
        assert any(name.startswith(field) for name in error["fields"]), error["fields"]
    assert team_ids(session_client) == []


def test_it_renames_a_team(session_client, team):
    response = session_client.patch(f"{URL}/{team.id}", {"name": "Renamed", "slug": "renamed"}, format="json")

    assert response.status_code == 200
    read_back = session_client.get(f"{URL}/{team.id}").json()
    assert (read_back["name"], read_back["slug"]) == ("Renamed", "renamed")


def test_it_deletes_a_team(session_client, team):
    response = session_client.delete(f"{URL}/{team.id}")

    assert response.status_code == 204
    assert team_ids(session_client) == []
    assert_error(session_client.get(f"{URL}/{team.id}"), 404, "not_found")


def test_it_refuses_a_second_team_with_the_same_slug(session_client, team):
    response = session_client.post(URL, {"name": "Another", "slug": team.slug}, format="json")

    error = assert_error(response, 409, "team_slug_taken")
    assert error["type"] == "conflict_error"
    assert team_ids(session_client) == [str(team.id)]


def test_it_refuses_to_rename_a_team_to_a_slug_that_is_taken(session_client, team, organization):
    other = TeamFactory(organization=organization)

    response = session_client.patch(f"{URL}/{other.id}", {"slug": team.slug}, format="json")

    assert_error(response, 409, "team_slug_taken")
    assert session_client.get(f"{URL}/{other.id}").json()["slug"] == other.slug


def test_a_slug_used_by_the_outsider_is_still_free_here(session_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)

    response = session_client.post(URL, {"name": "Same", "slug": their_team.slug}, format="json")

    assert response.status_code == 201


def test_it_refuses_to_delete_a_team_with_an_active_key_until_the_key_is_revoked(session_client, team):
    key = session_client.post("/api/v1/api-keys", {"name": "bound", "team_id": str(team.id)}, format="json")
    assert key.status_code == 201

    refused = session_client.delete(f"{URL}/{team.id}")

    error = assert_error(refused, 409, "team_has_active_keys")
    assert error["type"] == "conflict_error"
    assert team_ids(session_client) == [str(team.id)]

    assert session_client.delete(f"/api/v1/api-keys/{key.json()['id']}").status_code == 204
    assert session_client.delete(f"{URL}/{team.id}").status_code == 204
    assert team_ids(session_client) == []


def test_the_outsiders_team_is_invisible_and_untouchable(session_client, api_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)

    read = session_client.get(f"{URL}/{their_team.id}")
    change = session_client.patch(f"{URL}/{their_team.id}", {"name": "Mine now"}, format="json")
    delete = session_client.delete(f"{URL}/{their_team.id}")

    for response in (read, change, delete):
        assert_error(response, 404, "not_found")
    assert team_ids(session_client) == []
    tokens = login(api_client, outsider.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    assert api_client.get(f"{URL}/{their_team.id}").json()["name"] == their_team.name


def test_a_member_can_list_teams_but_not_create_change_or_delete_them(client_for, organization, team):
    member = client_for(organization, "member")

    assert team_ids(member) == [str(team.id)]
    assert_error(member.post(URL, {"name": "Mine"}, format="json"), 403, "permission_denied")
    assert_error(member.patch(f"{URL}/{team.id}", {"name": "Mine"}, format="json"), 403, "permission_denied")
    assert_error(member.delete(f"{URL}/{team.id}"), 403, "permission_denied")
    assert team_ids(member) == [str(team.id)]
