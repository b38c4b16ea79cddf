"""Budgets and rate limits through the management API: the ``budget`` and ``rate_limits`` of teams,
API keys and the organization (its settings), read and written with each object's own GET, POST and
PATCH, and refused as 400s naming the field when they are wrong."""

from decimal import Decimal

import pytest

from apps.core.errors import InvalidRequest
from apps.limits.models import Limits
from apps.limits.services import limits_check, limits_set
from tests.factories import TeamFactory, create_api_key
from tests.management.errors import assert_error
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

TEAMS, KEYS, ORGANIZATION = "/api/v1/teams", "/api/v1/api-keys", "/api/v1/organizations/current"
BUDGET = {"amount_usd": "25.00", "period": "daily", "thresholds": [80, 50, 100]}
READ_BACK = {"amount_usd": "25", "period": "daily", "thresholds": [50, 80, 100]}
RATES = {"rpm": 600, "tpm": 200000}
BUDGET_AMOUNT = Decimal("40")

BAD_BUDGETS = [
    ({**BUDGET, "amount_usd": "-5"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "0"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "0.000000"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "ten"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "1e3"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": 25}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": 25.5}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "1.1234567"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": "100000000"}, "budget.amount_usd"),
    ({**BUDGET, "amount_usd": None}, "budget.amount_usd"),
    ({"period": "daily"}, "budget.amount_usd"),
    ({**BUDGET, "period": "hourly"}, "budget.period"),
    ({"amount_usd": "5"}, "budget.period"),
    ({**BUDGET, "thresholds": [50, 150]}, "budget.thresholds[1]"),
    ({**BUDGET, "thresholds": [0]}, "budget.thresholds[0]"),
    ({**BUDGET, "thresholds": [50, 50]}, "budget.thresholds"),
    ({**BUDGET, "thresholds": [True]}, "budget.thresholds[0]"),
    ({**BUDGET, "thresholds": [50.0]}, "budget.thresholds[0]"),
    ({**BUDGET, "thresholds": list(range(1, 12))}, "budget.thresholds"),
    ({**BUDGET, "thresholds": "50"}, "budget.thresholds"),
    ({**BUDGET, "threshold": [50]}, "budget.threshold"),
    ({**BUDGET, "period": "fixed"}, "budget.starts_at"),
    (
        {**BUDGET, "period": "fixed", "starts_at": "2027-02-01T00:00:00Z", "ends_at": "2027-01-01T00:00:00Z"},
        "budget.ends_at",
    ),
    ({**BUDGET, "starts_at": "2027-01-01T00:00:00Z"}, "budget.starts_at"),
    (
        {**BUDGET, "period": "fixed", "starts_at": "soon", "ends_at": "2027-01-01T00:00:00Z"},
        "budget.starts_at",
    ),
    ("25.00", "budget"),
    ([BUDGET], "budget"),
]
BAD_RATE_LIMITS = [
    ({"rpm": -1}, "rate_limits.rpm"),
    ({"rpm": "600"}, "rate_limits.rpm"),
    ({"rpm": True}, "rate_limits.rpm"),
    ({"rpm": 1.5}, "rate_limits.rpm"),
    ({"tpm": 1_000_000_001}, "rate_limits.tpm"),
    ({"rpm": 5, "rps": 1}, "rate_limits.rps"),
    (600, "rate_limits"),
]


def assert_invalid(response, field: str) -> None:
    error = assert_error(response, 400, "validation_error")
    assert field in error["fields"], error


# --- Teams --------------------------------------------------------------------------------------


def test_a_team_is_created_with_a_budget_and_rate_limits_and_reads_them_back(session_client):
    response = session_client.post(
        TEAMS, {"name": "Research", "budget": BUDGET, "rate_limits": RATES}, format="json"
    )

    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["budget"], created["rate_limits"]) == (READ_BACK, RATES)
    assert session_client.get(f"{TEAMS}/{created['id']}").json() == created
    assert session_client.get(TEAMS).json()["results"] == [created]


def test_a_team_without_limits_reads_null(session_client, team):
    body = session_client.get(f"{TEAMS}/{team.id}").json()

    assert (body["budget"], body["rate_limits"]) == (None, None)


def test_a_fixed_budget_reads_back_its_window_in_utc(session_client, team):
    budget = {
        "amount_usd": "1000.5",
        "period": "fixed",
        "starts_at": "2027-01-01T01:00:00+01:00",
        "ends_at": "2027-04-01T00:00:00Z",
    }

    body = session_client.patch(f"{TEAMS}/{team.id}", {"budget": budget}, format="json").json()

    assert body["budget"] == {
        "amount_usd": "1000.5",
        "period": "fixed",
        "thresholds": [50, 80, 100],
        "starts_at": "2027-01-01T00:00:00Z",
        "ends_at": "2027-04-01T00:00:00Z",
    }


def test_changing_a_teams_budget_bumps_the_generation_the_proxy_reads(
    session_client, team, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(f"{TEAMS}/{team.id}", {"budget": BUDGET}, format="json")
    assert response.json()["budget"] == READ_BACK

    changed = {**BUDGET, "amount_usd": "30", "period": "weekly"}
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(f"{TEAMS}/{team.id}", {"budget": changed}, format="json")
    assert response.json()["budget"] == {**READ_BACK, "amount_usd": "30", "period": "weekly"}

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(f"{TEAMS}/{team.id}", {"rate_limits": {"rpm": 0}}, format="json")
    # A limit of 0 is accepted (it refuses every request); the budget is left as it was.
    assert response.json()["rate_limits"] == {"rpm": 0, "tpm": None}
    assert response.json()["budget"]["amount_usd"] == "30"


def test_null_removes_a_teams_budget_and_rate_limits(session_client, team, organization):
    limits_set(
        organization=organization, team=team, budget={"amount_usd": BUDGET_AMOUNT, "period": "monthly"}
    )
    limits_set(organization=organization, team=team, rate_limits=RATES)

    response = session_client.patch(f"{TEAMS}/{team.id}", {"budget": None}, format="json")
    assert (response.json()["budget"], response.json()["rate_limits"]) == (None, RATES)
    response = session_client.patch(f"{TEAMS}/{team.id}", {"rate_limits": None}, format="json")
    assert (response.json()["budget"], response.json()["rate_limits"]) == (None, None)

    assert not Limits.objects.filter(team=team).exists()


@pytest.mark.parametrize(("budget", "field"), BAD_BUDGETS)
def test_a_bad_team_budget_is_refused_and_changes_nothing(session_client, team, organization, budget, field):
    limits_set(
        organization=organization, team=team, budget={"amount_usd": BUDGET_AMOUNT, "period": "monthly"}
    )
    before = session_client.get(f"{TEAMS}/{team.id}").json()

    assert_invalid(
        session_client.patch(f"{TEAMS}/{team.id}", {"budget": budget, "name": "X"}, format="json"), field
    )

    assert session_client.get(f"{TEAMS}/{team.id}").json() == before


@pytest.mark.parametrize(("rate_limits", "field"), BAD_RATE_LIMITS)
def test_bad_team_rate_limits_are_refused(session_client, team, rate_limits, field):
    assert_invalid(
        session_client.patch(f"{TEAMS}/{team.id}", {"rate_limits": rate_limits}, format="json"), field
    )


def test_a_team_whose_budget_the_service_refuses_is_not_created(session_client, organization):
    # Repeated thresholds pass the serializer (types only) and are refused by limits_set, after the
    # team's insert: the same transaction takes the team back.
    body = {"name": "Doomed", "budget": {**BUDGET, "thresholds": [50, 50]}}

    assert_invalid(session_client.post(TEAMS, body, format="json"), "budget.thresholds")

    assert session_client.get(TEAMS).json()["results"] == []
    assert not Limits.objects.filter(organization=organization).exists()


def test_a_member_cannot_change_a_teams_budget(client_for, organization, team):
    member = client_for(organization, "member")

    response = member.patch(f"{TEAMS}/{team.id}", {"budget": BUDGET}, format="json")

    assert_error(response, 403, "permission_denied")
    assert member.get(f"{TEAMS}/{team.id}").json()["budget"] is None


def test_another_organizations_team_cannot_be_read_or_given_a_budget(session_client, outsider):
    theirs = TeamFactory(organization=outsider.organization)

    assert_error(session_client.get(f"{TEAMS}/{theirs.id}"), 404, "not_found")
    assert_error(
        session_client.patch(f"{TEAMS}/{theirs.id}", {"budget": BUDGET}, format="json"), 404, "not_found"
    )
    assert not Limits.objects.filter(team=theirs).exists()


# --- API keys -----------------------------------------------------------------------------------


def test_a_key_is_created_with_a_budget_and_rate_limits(session_client):
    response = session_client.post(
        KEYS, {"name": "ci", "budget": BUDGET, "rate_limits": {"rpm": 60}}, format="json"
    )

    assert response.status_code == 201, response.content
    created = response.json()
    assert (created["budget"], created["rate_limits"]) == (READ_BACK, {"rpm": 60, "tpm": None})
    detail = session_client.get(f"{KEYS}/{created['id']}").json()
    assert (detail["budget"], detail["rate_limits"]) == (READ_BACK, {"rpm": 60, "tpm": None})
    [listed] = session_client.get(KEYS).json()["results"]
    assert listed["budget"] == READ_BACK


def test_a_key_whose_budget_the_service_refuses_is_not_created(session_client, organization):
    budget = {
        **BUDGET,
        "period": "fixed",
        "starts_at": "2027-02-01T00:00:00Z",
        "ends_at": "2027-01-01T00:00:00Z",
    }

    assert_invalid(
        session_client.post(KEYS, {"name": "ci", "budget": budget}, format="json"), "budget.ends_at"
    )

    assert session_client.get(KEYS).json()["results"] == []


@pytest.mark.parametrize(("budget", "field"), BAD_BUDGETS[::3])
def test_a_bad_key_budget_is_refused_on_create(session_client, budget, field):
    assert_invalid(session_client.post(KEYS, {"name": "ci", "budget": budget}, format="json"), field)


def test_a_key_is_changed_with_patch_and_keeps_its_secret(
    session_client, api_key, organization, django_capture_on_commit_callbacks
):
    key, secret = api_key
    change = {
        "name": "renamed",
        "budget": BUDGET,
        "rate_limits": RATES,
        "expires_at": "2099-01-01T00:00:00Z",
        "allowed_data_regions": ["us", "eu", "us"],
    }

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(f"{KEYS}/{key.id}", change, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["name"], body["budget"], body["rate_limits"]) == ("renamed", READ_BACK, RATES)
    assert (body["expires_at"], body["allowed_data_regions"]) == ("2099-01-01T00:00:00Z", ["eu", "us"])
    assert body["key_prefix"] == secret[:12] and "key" not in body
    key.refresh_from_db()
    assert (key.name, key.key_prefix, key.permissions) == ("renamed", secret[:12], ["proxy:llm"])

    response = session_client.patch(f"{KEYS}/{key.id}", {"expires_at": None, "budget": None}, format="json")
    assert (response.json()["expires_at"], response.json()["budget"]) == (None, None)
    assert response.json()["rate_limits"] == RATES


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": 5}, "name"),
        ({"allowed_data_regions": ["EU!"]}, "allowed_data_regions[0]"),
        *[({"budget": budget}, field) for budget, field in BAD_BUDGETS[1::3]],
        *[({"rate_limits": rates}, field) for rates, field in BAD_RATE_LIMITS],
    ],
)
def test_a_bad_key_patch_is_refused_and_changes_nothing(session_client, api_key, change, field):
    key, _ = api_key
    before = session_client.get(f"{KEYS}/{key.id}").json()

    assert_invalid(
        session_client.patch(f"{KEYS}/{key.id}", {"name": "changed", **change}, format="json"), field
    )

    assert session_client.get(f"{KEYS}/{key.id}").json() == before


def test_a_key_patch_with_a_budget_the_service_refuses_renames_nothing(session_client, api_key):
    key, _ = api_key
    change = {"name": "changed", "budget": {**BUDGET, "thresholds": [80, 80]}}

    assert_invalid(session_client.patch(f"{KEYS}/{key.id}", change, format="json"), "budget.thresholds")

    key.refresh_from_db()
    assert key.name == "test key"


def test_a_member_cannot_change_a_key(client_for, organization, api_key):
    key, _ = api_key

    assert_error(
        client_for(organization, "member").patch(f"{KEYS}/{key.id}", {"name": "x"}, format="json"),
        403,
        "permission_denied",
    )


def test_another_organizations_key_cannot_be_changed(session_client, outsider):
    theirs, _ = create_api_key(outsider.organization)

    response = session_client.patch(f"{KEYS}/{theirs.id}", {"name": "mine", "budget": BUDGET}, format="json")

    assert_error(response, 404, "not_found")
    theirs.refresh_from_db()
    assert theirs.name == "test key"
    assert not Limits.objects.filter(api_key=theirs).exists()


# --- The organization ---------------------------------------------------------------------------


def test_the_organizations_budget_rate_limits_and_fail_mode_are_settings(
    session_client, organization, django_capture_on_commit_callbacks
):
    settings = session_client.get(ORGANIZATION).json()["settings"]
    assert (settings["budget"], settings["rate_limits"], settings["limits_fail_mode"]) == (None, None, "open")
    change = {
        "settings": {
            "budget": {**BUDGET, "period": "monthly"},
            "rate_limits": RATES,
            "limits_fail_mode": "closed",
        }
    }

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(ORGANIZATION, change, format="json")

    assert response.status_code == 200, response.content
    settings = response.json()["settings"]
    assert settings["budget"] == {**READ_BACK, "period": "monthly"}
    assert (settings["rate_limits"], settings["limits_fail_mode"]) == (RATES, "closed")
    assert session_client.get(ORGANIZATION).json()["settings"] == settings
    organization.refresh_from_db()
    assert organization.limits_fail_mode == "closed"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"limits_fail_mode": "sometimes"}, "settings.limits_fail_mode"),
        *[({"budget": budget}, f"settings.{field}") for budget, field in BAD_BUDGETS[2::3]],
        *[({"rate_limits": rates}, f"settings.{field}") for rates, field in BAD_RATE_LIMITS[::2]],
    ],
)
def test_bad_organization_limits_are_refused(session_client, settings, field):
    before = session_client.get(ORGANIZATION).json()

    assert_invalid(
        session_client.patch(ORGANIZATION, {"settings": {"log_bodies": "full", **settings}}, format="json"),
        field,
    )

    assert session_client.get(ORGANIZATION).json() == before


def test_an_organization_budget_the_service_refuses_leaves_the_other_settings_as_they_were(
    session_client, organization
):
    change = {
        "name": "Renamed",
        "settings": {"log_retention_days": 7, "budget": {**BUDGET, "thresholds": [1, 1]}},
    }

    response = session_client.patch(ORGANIZATION, change, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "settings.budget.thresholds" in error["fields"]
    organization.refresh_from_db()
    assert (organization.name, organization.log_retention_days) != ("Renamed", 7)


def test_a_member_reads_but_cannot_change_the_organizations_limits(client_for, organization):
    member = client_for(organization, "member")

    assert_error(
        member.patch(ORGANIZATION, {"settings": {"budget": BUDGET}}, format="json"), 403, "permission_denied"
    )
    assert member.get(ORGANIZATION).json()["settings"]["budget"] is None


def test_each_organization_sees_only_its_own_limits(session_client, organization, outsider):
    limits_set(organization=outsider.organization, budget={"amount_usd": BUDGET_AMOUNT, "period": "daily"})
    TeamFactory(organization=outsider.organization)

    assert session_client.get(ORGANIZATION).json()["settings"]["budget"] is None


# --- The service ----------------------------------------------------------------------------------


def test_the_service_refuses_a_budget_the_column_cannot_hold(organization):
    with pytest.raises(InvalidRequest) as refused:
        limits_set(organization=organization, budget={"amount_usd": Decimal("500000000"), "period": "daily"})

    assert list(refused.value.fields) == ["budget.amount_usd"]
    assert not Limits.objects.exists()


# --- The admin console ----------------------------------------------------------------------------


@pytest.fixture
def admin_browser(db):
    from django.test import Client

    from tests.factories import UserFactory

    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_admin_console_sets_a_teams_limits_through_the_service(
    admin_browser, organization, team, django_capture_on_commit_callbacks
):
    page = admin_browser.get(f"/admin/teams/team/{team.id}/change/").content.decode()
    assert "Set a budget or rate limits" in page
    form = {
        "organization": organization.id,
        "team": team.id,
        "budget_usd": "12.5",
        "budget_period": "weekly",
        "budget_thresholds": "90, 50",
        "rpm": "0",
    }

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post("/admin/limits/limits/add/", form)

    assert response.status_code == 302, response.content.decode()[:2000]
    limits = Limits.objects.get(team=team)
    assert (limits.budget_usd, limits.budget_period, limits.budget_thresholds) == (
        Decimal("12.5"),
        "weekly",
        [50, 90],
    )
    assert (limits.rpm, limits.tpm) == (0, None)
    assert (
        "budget 12.5 USD weekly" in admin_browser.get(f"/admin/teams/team/{team.id}/change/").content.decode()
    )

    change = {"budget_usd": "", "budget_period": "", "budget_thresholds": "", "rpm": "", "tpm": "100"}
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post(f"/admin/limits/limits/{limits.id}/change/", change)
    assert response.status_code == 302
    limits.refresh_from_db()
    assert (limits.budget_usd, limits.rpm, limits.tpm) == (None, None, 100)

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(f"/admin/limits/limits/{limits.id}/delete/", {"post": "yes"})
    assert not Limits.objects.filter(team=team).exists()


def test_the_admin_console_shows_the_services_refusal(admin_browser, organization, api_key):
    key, _ = api_key
    form = {
        "organization": organization.id,
        "api_key": key.id,
        "budget_usd": "5",
        "budget_period": "daily",
        "budget_thresholds": "50, 50",
    }

    response = admin_browser.post("/admin/limits/limits/add/", form, follow=True)

    assert "A threshold is listed twice." in response.content.decode()
    assert not Limits.objects.exists()


def test_the_admin_console_refuses_limits_of_another_organizations_team(
    admin_browser, organization, outsider
):
    theirs = TeamFactory(organization=outsider.organization)
    form = {"organization": organization.id, "team": theirs.id, "rpm": "10"}

    response = admin_browser.post("/admin/limits/limits/add/", form)

    assert response.status_code == 200
    assert "This belongs to another organization." in response.content.decode()
    assert not Limits.objects.exists()


def test_the_admin_console_refuses_limits_of_another_organizations_key(admin_browser, organization, outsider):
    theirs, _ = create_api_key(outsider.organization)
    form = {"organization": organization.id, "api_key": theirs.id, "rpm": "10"}

    response = admin_browser.post("/admin/limits/limits/add/", form)

    assert response.status_code == 200
    assert "This belongs to another organization." in response.content.decode()
    assert not Limits.objects.exists()


def test_the_admin_console_refuses_limits_of_a_team_and_a_key_at_once(
    admin_browser, organization, team, api_key
):
    key, _ = api_key
    form = {"organization": organization.id, "team": team.id, "api_key": key.id, "rpm": "10"}

    response = admin_browser.post("/admin/limits/limits/add/", form)

    assert response.status_code == 200
    assert "Limits apply to a team or an API key, not both." in response.content.decode()
    assert not Limits.objects.exists()


def test_the_admin_console_refuses_to_add_limits_that_set_nothing(admin_browser, organization, team):
    form = {"organization": organization.id, "team": team.id, "budget_thresholds": "50"}

    response = admin_browser.post("/admin/limits/limits/add/", form)

    assert response.status_code == 200
    assert "Set a budget or a rate limit (delete limits to remove them)." in response.content.decode()
    assert not Limits.objects.exists()


def test_the_service_refuses_what_the_admin_form_refuses(organization, outsider, team, api_key):
    # The rules live in limits_set, so a caller that skips the form's check meets them on the save.
    key, _ = api_key
    theirs = TeamFactory(organization=outsider.organization)
    rates = {"rpm": 10, "tpm": None}

    with pytest.raises(InvalidRequest) as both:
        limits_set(organization=organization, team=team, api_key=key, rate_limits=rates)
    with pytest.raises(InvalidRequest) as foreign:
        limits_set(organization=organization, team=theirs, rate_limits=rates)
    with pytest.raises(InvalidRequest) as nothing:
        limits_set(organization=organization, team=team, budget=None, rate_limits=None, adding=True)

    assert both.value.fields == {"api_key": ["Limits apply to a team or an API key, not both."]}
    assert foreign.value.fields == {"team": ["This belongs to another organization."]}
    assert nothing.value.message == "Set a budget or a rate limit (delete limits to remove them)."
    assert not Limits.objects.exists()


def test_the_admin_console_shows_the_organizations_and_keys_limits(admin_browser, organization, api_key):
    key, _ = api_key
    limits_set(organization=organization, rate_limits={"rpm": 5})
    limits_set(
        organization=organization, api_key=key, budget={"amount_usd": BUDGET_AMOUNT, "period": "daily"}
    )

    organization_page = admin_browser.get(f"/admin/organizations/organization/{organization.id}/change/")
    key_page = admin_browser.get(f"/admin/keys/apikey/{key.id}/change/")

    assert "rpm 5, tpm None" in organization_page.content.decode()
    assert "budget 40 USD daily" in key_page.content.decode()


def test_a_budget_the_service_parsed_parses_the_same_again(organization):
    # Teams and keys parse their bodies with the limits' input fields and hand the result to
    # limits_set, which parses it again: a Decimal amount and datetimes read as what they are.
    budget = {
        "amount_usd": "25.50",
        "period": "fixed",
        "starts_at": "2027-01-01T00:00:00Z",
        "ends_at": "2027-02-01T00:00:00Z",
        "thresholds": [80, 50],
    }
    once = limits_check(budget=budget, rate_limits={"rpm": 5})

    assert once["budget"]["amount_usd"] == Decimal("25.50") and once["budget"]["thresholds"] == [50, 80]
    assert once["rate_limits"] == {"rpm": 5, "tpm": None}
    assert limits_check(**once) == once
