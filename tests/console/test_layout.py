"""The console's frame: a side navigation grouped by task whose every link opens, the icon, the
budgets page, and the organization page without the operator's plan or a Redis choice that does not
apply. Numbers as people read them: money, token counts and durations."""

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import override_settings

from apps.console.areas import SECTIONS
from apps.console.templatetags.console_dash import compact, dollars, ms
from apps.limits.services import limits_set
from apps.teams.models import TeamMembership
from tests.audit.entries import AuditEntryFactory
from tests.console.conftest import post_form
from tests.factories import TeamFactory, create_api_key

NOW = datetime(2026, 11, 20, 12, 30, tzinfo=UTC)


def navigation(page: str) -> list[tuple[str, list[str]]]:
    """The side bar as (section, [link labels]), in the order shown."""
    bar = page.split('<nav class="sidenav"')[1].split("</nav>")[0]
    return [
        (heading, re.findall(r'<a href="[^"]+"[^>]*>([^<]+)</a>', links))
        for heading, links in re.findall(
            r'<p class="nav-heading"[^>]*>([^<]+)</p>\s*<ul[^>]*>(.*?)</ul>', bar, re.S
        )
    ]


@pytest.mark.django_db
def test_the_side_navigation_groups_the_pages_by_task(console_for, organization):
    page = console_for(organization, "member").get("/console/logs/").content.decode()

    assert navigation(page) == [
        ("Traffic", ["Dashboard", "Logs", "Live tail"]),
        ("Access", ["API keys", "Teams", "Members", "SSO"]),
        ("Routing", ["Providers", "Models"]),
        ("Governance", ["Policies", "Budgets"]),
        ("Build", ["Prompts", "Experiments", "Playground"]),
        ("Settings", ["Organization", "Webhooks", "Account"]),
    ]
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', page) == ["/console/logs/"]


@pytest.mark.django_db
def test_every_link_of_the_navigation_opens_for_an_owner_and_marks_itself_current(console_for, organization):
    client = console_for(organization, "owner")
    for section in SECTIONS:
        for link in section.links:
            page = client.get(f"/console/{_path_of(link.url_name)}")
            assert page.status_code == 200, link
            bar = page.content.decode().split('<nav class="sidenav"')[1].split("</nav>")[0]
            current = re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', bar)
            assert current == [link.label], link


def _path_of(url_name: str) -> str:
    from django.urls import reverse

    return reverse(url_name).removeprefix("/console/")


@pytest.mark.django_db
def test_the_menu_opens_without_javascript_on_a_phone(console_for, organization):
    page = console_for(organization, "member").get("/console/dashboard/").content.decode()
    # A checkbox before the bar, its label in the top bar, and the side bar after both: the
    # stylesheet shows the bar on a narrow screen when the box is checked.
    assert page.index('id="nav-toggle"') < page.index('for="nav-toggle"') < page.index('class="sidenav"')


@pytest.mark.django_db
def test_the_browsers_icon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"].endswith(".svg")


@pytest.mark.django_db
def test_the_organization_page_shows_no_plan_to_anyone(console_for, organization):
    organization.plan = "enterprise"
    organization.save(update_fields=["plan"])
    page = console_for(organization, "owner").get("/console/organization/settings/").content.decode()
    assert "Plan" not in page and "enterprise" not in page


@pytest.mark.django_db
@pytest.mark.parametrize("redis_url, asked", [("", False), ("redis://127.0.0.1:6379/15", True)])
def test_what_limits_do_without_redis_is_asked_only_where_limits_are_counted_in_redis(
    console_for, organization, redis_url, asked
):
    client = console_for(organization, "owner")
    with override_settings(REDIS_URL=redis_url):
        page = client.get("/console/organization/settings/").content.decode()
        response = post_form(
            client,
            "/console/organization/settings/",
            "/console/organization/settings/edit",
            {
                "name": "Renamed",
                "log_bodies": "metadata",
                "log_retention_days": "30",
                "cache_ttl_seconds": "60",
                "cache_semantic_threshold": "0.95",
            },
        )
    assert ("While Redis cannot be reached" in page) is asked
    assert ('name="limits_fail_mode"' in page) is asked
    # The form without the question saves, and leaves the setting as it was.
    assert response.status_code == 302
    organization.refresh_from_db()
    assert organization.name == "Renamed" and organization.limits_fail_mode == "open"


def test_the_team_slugs_pattern_is_one_every_browser_accepts():
    # Chromium compiles a pattern with the "v" flag, where a "-" first in a class is an error: the
    # browser then skipped the check altogether.
    from pathlib import Path

    fields = Path("templates/console/teams/team_fields.html").read_text()
    pattern = re.search(r'name="slug"[^>]*pattern="([^"]+)"', fields).group(1)
    assert not re.search(r"\[-", pattern)
    assert re.fullmatch(pattern, "team_a-1") and not re.fullmatch(pattern, "team a")


@pytest.fixture
def frozen(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.mark.django_db
def test_the_budgets_page_lists_what_the_caller_may_read_with_links_to_where_each_is_set(
    console_for, organization, outsider, frozen
):
    mine = TeamFactory(organization=organization, name="Mine")
    other = TeamFactory(organization=organization, name="Other")
    key, _ = create_api_key(organization, name="my-key", team=mine)
    limits_set(organization=organization, budget={"amount_usd": Decimal("10"), "period": "monthly"})
    limits_set(organization=organization, team=mine, budget={"amount_usd": Decimal("4"), "period": "daily"})
    limits_set(organization=organization, team=other, budget={"amount_usd": Decimal("2"), "period": "daily"})
    limits_set(
        organization=organization, api_key=key, budget={"amount_usd": Decimal("1"), "period": "weekly"}
    )
    limits_set(organization=outsider.organization, budget={"amount_usd": Decimal("99"), "period": "monthly"})
    AuditEntryFactory(
        organization=organization,
        team_id=mine.id,
        api_key_id=key.id,
        cost_usd=Decimal("0.00015"),
        created_at=NOW - timedelta(minutes=5),
    )
    member = console_for(organization, "member")
    TeamMembership.objects.create(team=mine, user=member.membership.user)

    admin_page = console_for(organization, "admin").get("/console/budgets/").content.decode()
    member_page = member.get("/console/budgets/").content.decode()

    assert [_row_names(admin_page)] == [["The organization", "Team Mine", "Team Other", "Key my-key"]]
    assert "$99" not in admin_page
    assert (
        f'href="/console/teams/{mine.id}/"' in admin_page
        and f'href="/console/api-keys/{key.id}/"' in admin_page
    )
    assert "$0.00015" in admin_page  # spent by the team, at two significant digits
    assert _row_names(member_page) == ["The organization", "Team Mine", "Key my-key"]
    assert "1 more budget of teams you are not in" in member_page


def _row_names(page: str) -> list[str]:
    table = page.split('class="dash-budgets"')[1].split("</table>")[0]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cell)).strip()
        for cell in re.findall(r"<tr[^>]*>\s*<td>(.*?)</td>", table, re.S)
    ]


@pytest.mark.django_db
def test_without_budgets_the_page_says_where_to_set_one(console_for, organization):
    page = console_for(organization, "admin").get("/console/budgets/").content.decode()
    assert "No budgets yet" in page and 'href="/console/organization/settings/"' in page


@pytest.mark.parametrize(
    "amount, shown",
    [
        ("0", "$0"),
        ("0.0002", "$0.0002"),
        ("0.000153", "$0.00015"),
        ("0.0153", "$0.015"),
        ("0.5", "$0.50"),
        ("0.999", "$1.00"),
        ("1234.5678", "$1,234.57"),
        ("0.00000042", "$0.00000042"),
        (Decimal("-0.002"), "-$0.002"),
        ("NaN", "NaN"),  # not an amount: shown as it is, never an error
        ("1e30", "1e30"),
    ],
)
def test_money_reads_with_two_significant_digits_under_a_dollar_and_cents_above(amount, shown):
    assert dollars(amount) == shown


@pytest.mark.parametrize(
    "number, shown", [(950, "950"), (1000, "1k"), (1234, "1.2k"), (123456, "123k"), (1234567, "1.2M")]
)
def test_token_counts_are_compact(number, shown):
    assert compact(number) == shown


@pytest.mark.parametrize(
    "milliseconds, shown",
    [
        (0.42, "0.4 ms"),
        (85.4, "85 ms"),
        (999.6, "1.00 s"),
        (1250, "1.25 s"),
        (12345, "12.3 s"),
        (125000, "2 min 5 s"),
    ],
)
def test_durations_read_in_the_unit_that_suits_them(milliseconds, shown):
    assert ms(milliseconds) == shown
