"""The cache settings: the organization's under /api/v1/organizations/current, a team's on the team."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core.generations import local_generation
from apps.organizations.selectors import organization_snapshot
from apps.teams.selectors import team_snapshots
from tests.factories import ModelAliasFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/organizations/current"
DEFAULTS = {
    "cache_enabled": True,
    "cache_ttl_seconds": 3600,
    "cache_any_temperature": False,
    "cache_semantic_enabled": False,
    "cache_semantic_threshold": 0.95,
    "cache_embedding_model": "",
}


def cache_settings(body: dict) -> dict:
    return {name: value for name, value in body.items() if name.startswith("cache_")}


def test_an_organization_starts_with_the_documented_defaults(session_client):
    assert cache_settings(session_client.get(URL).json()["settings"]) == DEFAULTS


def test_an_admin_changes_them_and_the_proxys_snapshot_carries_them(
    client_for, organization, django_capture_on_commit_callbacks
):
    ModelAliasFactory(organization=organization, alias="text-embedding-3-small")
    admin = client_for(organization, "admin")
    changes = {
        "cache_enabled": False,
        "cache_ttl_seconds": 30 * 24 * 3600,
        "cache_any_temperature": True,
        "cache_semantic_enabled": True,
        "cache_semantic_threshold": 0.875,
        "cache_embedding_model": "text-embedding-3-small",
    }
    generation = local_generation(organization.id)

    with django_capture_on_commit_callbacks(execute=True):
        response = admin.patch(URL, {"settings": changes}, format="json")

    assert response.status_code == 200, response.content
    assert cache_settings(response.json()["settings"]) == changes
    assert cache_settings(admin.get(URL).json()["settings"]) == changes
    assert local_generation(organization.id) == generation + 1
    snapshot = organization_snapshot(organization.id)
    assert (snapshot.cache_enabled, snapshot.cache_ttl_seconds, snapshot.cache_any_temperature) == (
        False,
        30 * 24 * 3600,
        True,
    )
    assert (snapshot.cache_semantic_enabled, snapshot.cache_semantic_threshold) == (True, 0.875)
    assert snapshot.cache_embedding_model == "text-embedding-3-small"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"cache_enabled": "yes"}, "settings.cache_enabled"),
        ({"cache_enabled": 1}, "settings.cache_enabled"),
        ({"cache_ttl_seconds": 0}, "settings.cache_ttl_seconds"),
        ({"cache_ttl_seconds": 30 * 24 * 3600 + 1}, "settings.cache_ttl_seconds"),
        ({"cache_ttl_seconds": "60"}, "settings.cache_ttl_seconds"),
        ({"cache_ttl_seconds": 60.5}, "settings.cache_ttl_seconds"),
        ({"cache_any_temperature": None}, "settings.cache_any_temperature"),
        ({"cache_semantic_threshold": 1.01}, "settings.cache_semantic_threshold"),
        ({"cache_semantic_threshold": -0.1}, "settings.cache_semantic_threshold"),
        ({"cache_semantic_threshold": "0.9"}, "settings.cache_semantic_threshold"),
        ({"cache_semantic_threshold": True}, "settings.cache_semantic_threshold"),
        ({"cache_embedding_model": "not-in-the-catalog"}, "settings.cache_embedding_model"),
        ({"cache_embedding_model": 7}, "settings.cache_embedding_model"),
        # L3 without an embeddings model to compare prompts with.
        ({"cache_semantic_enabled": True}, "settings.cache_embedding_model"),
    ],
)
def test_it_refuses_bad_values_naming_the_field_and_changing_nothing(session_client, settings, field):
    before = session_client.get(URL).json()

    response = session_client.patch(URL, {"settings": settings}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert any(name.startswith(field) for name in error["fields"]), error["fields"]
    assert session_client.get(URL).json() == before


def test_another_organizations_alias_is_not_an_embeddings_model_of_this_one(session_client, outsider):
    ModelAliasFactory(organization=outsider.organization, alias="their-embeddings")

    response = session_client.patch(
        URL, {"settings": {"cache_embedding_model": "their-embeddings"}}, format="json"
    )

    assert_error(response, 400, "validation_error")


def test_unknown_settings_change_nothing(session_client, time_machine):
    before = session_client.get(URL).json()
    time_machine.move_to(timezone.now() + timedelta(seconds=5))  # a write would show in updated_at

    response = session_client.patch(URL, {"settings": {"cache_size": 5}}, format="json")

    assert response.status_code in (200, 400)
    assert session_client.get(URL).json() == before


def test_a_member_reads_them_but_cannot_change_them(client_for, organization):
    member = client_for(organization, "member")

    assert cache_settings(member.get(URL).json()["settings"]) == DEFAULTS
    response = member.patch(URL, {"settings": {"cache_enabled": False}}, format="json")

    assert_error(response, 403, "permission_denied")
    organization.refresh_from_db()
    assert organization.cache_enabled is True


def test_a_change_leaves_the_outsiders_settings_alone(session_client, client_for, outsider):
    session_client.patch(URL, {"settings": {"cache_enabled": False, "cache_ttl_seconds": 5}}, format="json")

    theirs = client_for(outsider.organization, "member").get(URL).json()["settings"]
    assert cache_settings(theirs) == DEFAULTS


# --- Teams -----------------------------------------------------------------------------------------


def team_url(team) -> str:
    return f"/api/v1/teams/{team.id}"


def test_a_team_follows_the_organization_until_it_sets_its_own(
    session_client, team, django_capture_on_commit_callbacks
):
    body = session_client.get(team_url(team)).json()
    assert (body["cache_enabled"], body["cache_ttl_seconds"]) == (None, None)
    generation = local_generation(team.organization_id)

    with django_capture_on_commit_callbacks(execute=True):
        response = session_client.patch(
            team_url(team), {"cache_enabled": False, "cache_ttl_seconds": 120}, format="json"
        )

    assert response.status_code == 200, response.content
    assert (response.json()["cache_enabled"], response.json()["cache_ttl_seconds"]) == (False, 120)
    assert local_generation(team.organization_id) == generation + 1
    (snapshot,) = team_snapshots(team.organization_id)
    assert (snapshot.cache_enabled, snapshot.cache_ttl_seconds) == (False, 120)

    back = session_client.patch(
        team_url(team), {"cache_enabled": None, "cache_ttl_seconds": None}, format="json"
    )
    assert (back.json()["cache_enabled"], back.json()["cache_ttl_seconds"]) == (None, None)


def test_a_team_is_created_with_its_cache_settings(session_client):
    response = session_client.post(
        "/api/v1/teams", {"name": "Search", "cache_ttl_seconds": 60}, format="json"
    )

    assert response.status_code == 201, response.content
    assert (response.json()["cache_enabled"], response.json()["cache_ttl_seconds"]) == (None, 60)


@pytest.mark.parametrize(
    "change",
    [
        {"cache_enabled": "no"},
        {"cache_ttl_seconds": 0},
        {"cache_ttl_seconds": 10**9},
        {"cache_ttl_seconds": "5"},
    ],
)
def test_a_team_refuses_bad_values(session_client, team, change):
    response = session_client.patch(team_url(team), change, format="json")

    error = assert_error(response, 400, "validation_error")
    assert set(error["fields"]) == set(change)


def test_a_member_cannot_change_a_teams_cache_settings(client_for, team):
    response = client_for(team.organization, "member").patch(
        team_url(team), {"cache_enabled": False}, format="json"
    )

    assert_error(response, 403, "permission_denied")


def test_another_organizations_team_is_out_of_reach(session_client, outsider):
    from tests.factories import TeamFactory

    theirs = TeamFactory(organization=outsider.organization)

    response = session_client.patch(team_url(theirs), {"cache_enabled": False}, format="json")

    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.cache_enabled is None
