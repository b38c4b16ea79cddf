"""The console's team pages: list, create, edit (regions, cache, budget, rate limits), members, usage,
delete (409 with active keys); roles, tenancy, CSRF and refused input."""

import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.limits.models import Limits
from apps.teams.models import Team, TeamMembership
from tests.console.conftest import post_form
from tests.factories import MembershipFactory, TeamFactory, create_api_key
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

LIST = "/console/teams/"


def page_of(team: Team) -> str:
    return f"{LIST}{team.id}/"


def spend(organization, team: Team, cost: str) -> None:
    AuditEntry.objects.create(
        id=uuid.uuid4(),
        organization=organization,
        created_at=timezone.now(),
        endpoint="chat.completions",
        status=200,
        team_id=team.id,
        cost_usd=Decimal(cost),
    )


def team_form(**fields) -> dict:
    form = {
        "name": "",
        "slug": "",
        "allowed_data_regions": "",
        "cache_enabled": "",
        "cache_ttl_seconds": "",
        "budget_amount_usd": "",
        "budget_period": "monthly",
        "budget_thresholds": "",
        "rpm": "",
        "tpm": "",
    }
    form.update(fields)
    return form


def test_a_member_lists_the_teams_and_never_another_organizations(console_for, organization, outsider):
    TeamFactory(organization=organization, name="Search", allowed_data_regions=["eu"])
    TeamFactory(organization=outsider.organization, name="Their team")
    client = console_for(organization, "member")
    page = client.get(LIST).content.decode()
    assert "Search" in page and ">eu<" in page
    assert "Their team" not in page
    assert "Create a team" not in page


def test_an_admin_creates_a_team_with_regions_cache_and_limits(
    console_for, organization, django_capture_on_commit_callbacks
):
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            f"{LIST}new",
            f"{LIST}new",
            team_form(
                name="Search Team",
                allowed_data_regions="us, eu",
                cache_enabled="false",
                cache_ttl_seconds="600",
                budget_amount_usd="25.00",
                budget_period="daily",
                rpm="60",
            ),
        )
    assert response.status_code == 302
    team = Team.objects.get(organization=organization)
    assert response["Location"] == page_of(team)
    assert (team.name, team.slug, team.allowed_data_regions, team.cache_enabled, team.cache_ttl_seconds) == (
        "Search Team",
        "search-team",
        ["eu", "us"],
        False,
        600,
    )
    limits = Limits.objects.get(team=team)
    assert (limits.budget_usd, limits.budget_period, limits.rpm, limits.tpm) == (25, "daily", 60, None)
    assert "$25.00 daily" in client.get(LIST).content.decode()


def test_a_refused_team_says_why_and_creates_nothing(console_for, organization):
    TeamFactory(organization=organization, name="Taken", slug="taken")
    client = console_for(organization, "admin")
    response = post_form(
        client,
        f"{LIST}new",
        f"{LIST}new",
        team_form(
            name="x",
            slug="not a slug",
            allowed_data_regions="EU!",
            cache_ttl_seconds="forever",
            budget_amount_usd="-5",
            rpm="lots",
        ),
    )
    assert response.status_code == 400
    page = response.content.decode()
    for field in (
        "slug",
        "allowed_data_regions",
        "cache_ttl_seconds",
        "budget.amount_usd",
        "rate_limits.rpm",
    ):
        assert f"<code>{field}" in page, field
    response = post_form(client, f"{LIST}new", f"{LIST}new", team_form(name="Again", slug="taken"))
    assert response.status_code == 409
    assert "exists already" in response.content.decode()
    # A budget the service refuses as a whole creates no team either.
    response = post_form(
        client,
        f"{LIST}new",
        f"{LIST}new",
        team_form(name="Fixed", budget_amount_usd="5", budget_period="fixed"),
    )
    assert response.status_code == 400
    assert "needs starts_at and ends_at" in response.content.decode()
    assert list(Team.objects.filter(organization=organization).values_list("slug", flat=True)) == ["taken"]


def test_an_admin_edits_a_team_and_removes_its_limits(
    console_for, organization, django_capture_on_commit_callbacks
):
    team = TeamFactory(organization=organization, name="Old", slug="old")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            page_of(team),
            f"{page_of(team)}edit",
            team_form(name="New", slug="new", cache_enabled="true", budget_amount_usd="10", tpm="5000"),
        )
    assert response.status_code == 302
    team.refresh_from_db()
    assert (team.name, team.slug, team.cache_enabled) == ("New", "new", True)
    assert Limits.objects.get(team=team).tpm == 5000
    post_form(client, page_of(team), f"{page_of(team)}edit", team_form(name="New", slug="new"))
    team.refresh_from_db()
    assert team.cache_enabled is None
    assert not Limits.objects.filter(team=team).exists()


def test_a_refused_edit_changes_nothing(console_for, organization):
    TeamFactory(organization=organization, slug="taken")
    team = TeamFactory(organization=organization, name="Mine", slug="mine")
    client = console_for(organization, "admin")
    response = post_form(
        client, page_of(team), f"{page_of(team)}edit", team_form(name="Renamed", slug="taken")
    )
    assert response.status_code == 409
    response = post_form(client, page_of(team), f"{page_of(team)}edit", team_form(name="", slug="mine"))
    assert response.status_code == 400 and "<code>name</code>" in response.content.decode()
    team.refresh_from_db()
    assert (team.name, team.slug) == ("Mine", "mine")


def test_an_admin_adds_and_removes_members_of_the_organization_only(console_for, organization, outsider):
    team = TeamFactory(organization=organization)
    colleague = MembershipFactory(organization=organization, role="member").user
    client = console_for(organization, "admin")
    page = client.get(page_of(team)).content.decode()
    assert colleague.email in page  # offered in the add list
    assert outsider.user.email not in page
    response = post_form(client, page_of(team), f"{page_of(team)}members/add", {"user_id": str(colleague.id)})
    assert response.status_code == 302
    assert TeamMembership.objects.filter(team=team, user=colleague).exists()
    response = post_form(client, page_of(team), f"{page_of(team)}members/add", {"user_id": str(colleague.id)})
    assert response.status_code == 409 and "already" in response.content.decode()
    # Another organization's user reads like one that does not exist.
    response = post_form(
        client, page_of(team), f"{page_of(team)}members/add", {"user_id": str(outsider.user.id)}
    )
    assert response.status_code == 400 and "No such user in this organization." in response.content.decode()
    response = post_form(client, page_of(team), f"{page_of(team)}members/add", {"user_id": ""})
    assert response.status_code == 400
    assert not TeamMembership.objects.filter(user=outsider.user).exists()

    response = post_form(client, page_of(team), f"{page_of(team)}members/{colleague.id}/remove", {})
    assert response.status_code == 302
    assert not TeamMembership.objects.filter(team=team).exists()
    response = post_form(client, page_of(team), f"{page_of(team)}members/{colleague.id}/remove", {})
    assert response.status_code == 404


def test_a_member_reads_the_usage_of_their_own_teams_only(console_for, organization):
    theirs = TeamFactory(organization=organization, name="Theirs")
    other = TeamFactory(organization=organization, name="Other")
    Limits.objects.create(
        organization=organization, team=theirs, budget_usd=Decimal(10), budget_period="monthly"
    )
    spend(organization, theirs, "2.5")
    spend(organization, other, "7")
    client = console_for(organization, "member")
    TeamMembership.objects.create(team=theirs, user=client.membership.user)

    page = client.get(page_of(theirs)).content.decode()
    assert "$2.5" in page and "left of $10" in page and "$7.5" in page
    assert "your team" in client.get(LIST).content.decode()
    other_page = client.get(page_of(other)).content.decode()
    assert "Usage this" not in other_page and "$7" not in other_page
    # An admin reads every team's.
    admin = console_for(organization, "admin")
    assert "$7" in admin.get(page_of(other)).content.decode()


def test_a_team_with_active_keys_is_not_deleted(
    console_for, organization, django_capture_on_commit_callbacks
):
    team = TeamFactory(organization=organization, name="Busy")
    api_key, _ = create_api_key(organization, team=team)
    client = console_for(organization, "admin")
    response = post_form(client, page_of(team), f"{page_of(team)}delete", {})
    assert response.status_code == 409
    assert "still has active API keys" in response.content.decode()
    assert Team.objects.filter(pk=team.pk).exists()

    from apps.keys.services import api_key_revoke

    api_key_revoke(api_key=api_key)
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page_of(team), f"{page_of(team)}delete", {})
    assert response.status_code == 302 and response["Location"] == LIST
    assert not Team.objects.filter(pk=team.pk).exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("new", team_form(name="Sneaky")),
        ("{id}/edit", team_form(name="Renamed", slug="kept")),
        ("{id}/delete", {}),
        ("{id}/members/add", {"user_id": "{user}"}),
        ("{id}/members/{user}/remove", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    team = TeamFactory(organization=organization, name="Kept", slug="kept")
    colleague = MembershipFactory(organization=organization, role="member").user
    inside = MembershipFactory(organization=organization, role="member").user
    TeamMembership.objects.create(team=team, user=inside)
    client = console_for(organization, "member")
    assert client.get(f"{LIST}new").status_code == 403
    user = colleague if "add" in path else inside
    data = {name: value.replace("{user}", str(user.id)) for name, value in data.items()}
    response = post_form(client, LIST, LIST + path.format(id=team.id, user=user.id), data)
    assert response.status_code == 403
    team.refresh_from_db()
    assert team.name == "Kept"
    assert Team.objects.filter(organization=organization).count() == 1
    assert list(TeamMembership.objects.filter(team=team).values_list("user", flat=True)) == [inside.id]


@pytest.mark.parametrize("suffix", ["", "edit", "delete", "members/add", "members/{user}/remove"])
def test_another_organizations_team_answers_404(console_for, organization, outsider, suffix):
    theirs = TeamFactory(organization=outsider.organization, name="Theirs", slug="theirs")
    TeamMembership.objects.create(team=theirs, user=outsider.user)
    client = console_for(organization, "owner")
    path = f"{page_of(theirs)}{suffix.format(user=outsider.user.id)}"
    data = team_form(name="Mine", slug="mine") | {"user_id": str(client.membership.user.id)}
    response = client.get(path) if not suffix else post_form(client, LIST, path, data)
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.name == "Theirs"
    assert list(TeamMembership.objects.filter(team=theirs).values_list("user", flat=True)) == [
        outsider.user.id
    ]


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    team = TeamFactory(organization=organization)
    client = console_for(organization, "owner")
    assert client.post(f"{page_of(team)}delete", {}).status_code == 403
    assert Team.objects.filter(pk=team.pk).exists()
