"""/api/v1/teams/{id}/members: the organization's users who belong to a team (a member of the
organization reads the usage of the teams they belong to). Admins add and remove; members read."""

import uuid

import pytest

from apps.teams.models import TeamMembership
from tests.factories import MembershipFactory, TeamFactory, UserFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db


def members_url(team) -> str:
    return f"/api/v1/teams/{team.id}/members"


def member_emails(client, team) -> list[str]:
    response = client.get(members_url(team))
    assert response.status_code == 200, response.content
    return [member["email"] for member in response.json()["results"]]


def test_an_admin_adds_users_by_id_or_email_and_removes_them(session_client, organization, team):
    alice = MembershipFactory(organization=organization, role="member").user
    bob = MembershipFactory(organization=organization, role="admin").user

    by_id = session_client.post(members_url(team), {"user_id": str(alice.id)}, format="json")
    by_email = session_client.post(members_url(team), {"email": bob.email.upper()}, format="json")

    assert by_id.status_code == 201, by_id.content
    assert by_id.json()["user_id"] == str(alice.id) and by_id.json()["email"] == alice.email
    assert by_email.status_code == 201 and by_email.json()["user_id"] == str(bob.id)
    assert sorted(member_emails(session_client, team)) == sorted([alice.email, bob.email])

    response = session_client.delete(f"{members_url(team)}/{alice.id}")

    assert response.status_code == 204
    assert member_emails(session_client, team) == [bob.email]
    assert_error(session_client.delete(f"{members_url(team)}/{alice.id}"), 404, "not_found")


def test_adding_a_member_twice_is_a_conflict(session_client, organization, team):
    user = MembershipFactory(organization=organization, role="member").user
    session_client.post(members_url(team), {"user_id": str(user.id)}, format="json")

    error = assert_error(
        session_client.post(members_url(team), {"email": user.email}, format="json"),
        409,
        "already_a_team_member",
    )

    assert error["type"] == "conflict_error"
    assert TeamMembership.objects.filter(team=team).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": None}, "user_id"),
        ({"user_id": "not-a-uuid"}, "user_id"),
        ({"email": "not an email"}, "email"),
        ({"email": "nobody@example.com"}, "email"),
        ({"user_id": str(uuid.uuid4())}, "user_id"),
    ],
)
def test_a_bad_member_is_refused(session_client, team, body, field):
    error = assert_error(session_client.post(members_url(team), body, format="json"), 400, "validation_error")

    assert field in error["fields"], error
    assert member_emails(session_client, team) == []


def test_one_of_user_id_and_email_is_needed(session_client, organization, team):
    user = MembershipFactory(organization=organization, role="member").user

    for body in ({"user_id": str(user.id), "email": user.email}, {}):
        error = assert_error(
            session_client.post(members_url(team), body, format="json"), 400, "validation_error"
        )
        assert error["message"] == "Give one of user_id or email."
    assert member_emails(session_client, team) == []


def test_a_user_of_another_organization_or_of_none_cannot_join(session_client, team, outsider):
    loner = UserFactory()
    for body, field in (
        ({"user_id": str(outsider.user.id)}, "user_id"),
        ({"email": outsider.user.email}, "email"),
        ({"user_id": str(loner.id)}, "user_id"),
    ):
        error = assert_error(
            session_client.post(members_url(team), body, format="json"), 400, "validation_error"
        )
        assert error["fields"] == {field: ["No such user in this organization."]}

    assert not TeamMembership.objects.exists()


def test_another_organizations_team_is_not_found(session_client, organization, outsider):
    theirs = TeamFactory(organization=outsider.organization)
    TeamMembership.objects.create(team=theirs, user=outsider.user)
    mine = MembershipFactory(organization=organization, role="member").user

    assert_error(session_client.get(members_url(theirs)), 404, "not_found")
    assert_error(
        session_client.post(members_url(theirs), {"user_id": str(mine.id)}, format="json"), 404, "not_found"
    )
    assert_error(session_client.delete(f"{members_url(theirs)}/{outsider.user.id}"), 404, "not_found")
    assert TeamMembership.objects.filter(team=theirs).count() == 1
    assert_error(session_client.get("/api/v1/teams/not-a-uuid/members"), 404, "not_found")


def test_a_member_reads_the_members_but_cannot_change_them(client_for, organization, team):
    member = client_for(organization, "member")
    other = MembershipFactory(organization=organization, role="member").user
    TeamMembership.objects.create(team=team, user=other)

    assert member_emails(member, team) == [other.email]
    assert_error(
        member.post(members_url(team), {"user_id": str(other.id)}, format="json"), 403, "permission_denied"
    )
    assert_error(member.delete(f"{members_url(team)}/{other.id}"), 403, "permission_denied")
    assert TeamMembership.objects.filter(team=team).count() == 1


def test_a_user_who_left_the_organization_is_no_longer_listed(session_client, organization, team):
    membership = MembershipFactory(organization=organization, role="member")
    session_client.post(members_url(team), {"user_id": str(membership.user.id)}, format="json")

    membership.delete()

    assert member_emails(session_client, team) == []
