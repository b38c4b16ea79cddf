"""In a browser at a laptop's and a phone's size: the side navigation and its phone menu, the log's
columns that matter without scrolling, money and chart axes as people read them, a browser-checked
slug, a password change that signs the other browsers out, and a webhook's test delivery that settles
on the page (a live Celery worker sends it)."""

import re
import sys
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.webhooks import services as webhooks
from tests.audit.entries import AuditEntryFactory
from tests.e2e.conftest import screenshot, sign_in, with_live_password
from tests.factories import PASSWORD, TeamFactory, create_api_key
from tests.servers import daphne_server_beside, free_port

pytestmark = pytest.mark.django_db(transaction=True)

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def gateway(django_db_setup, static_root, tmp_path_factory):
    """A live gateway with a Celery worker beside it, as `make run` has (a webhook's test delivery is
    the worker's task)."""
    settings = {"STATIC_ROOT": str(static_root), "GATEWAY_ALLOW_PRIVATE_WEBHOOKS": "true"}
    worker = [sys.executable, "-m", "celery", "-A", "gateway_project", "--quiet", "worker", "--pool", "solo"]
    with daphne_server_beside(tmp_path_factory.mktemp("gateway"), worker, **settings) as url:
        yield url


@pytest.fixture
def traffic(owner):
    """A team, a named key and a few of its requests, one of them answered by the cache."""
    organization = owner.organization
    with_live_password(owner)
    team = TeamFactory(organization=organization, name="Checkout")
    key, _ = create_api_key(organization, name="checkout-service", team=team)
    now = timezone.now()
    for number, cache in enumerate(("miss", "l1", "miss")):
        AuditEntryFactory(
            organization=organization,
            created_at=now - timezone.timedelta(minutes=10 * number),
            api_key_id=key.id,
            api_key_prefix=key.key_prefix,
            team_id=team.id,
            requested_model="a-rather-long-model-alias-for-the-support-assistant",
            cache=cache,
            cost_usd=Decimal("0.00015321"),
            input_tokens=12_345,
            output_tokens=678,
            latency_ms=1_250,
        )
    return organization


def test_the_log_shows_its_columns_at_a_laptops_width_without_scrolling(page, gateway, owner, traffic):
    page.set_viewport_size(LAPTOP)
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/logs/")

    table = page.locator("table.log-table")
    wrap = page.locator(".table-wrap", has=table)
    assert wrap.evaluate("element => element.scrollWidth - element.clientWidth") <= 0
    for heading in ("Time (UTC)", "Model", "Key", "Team", "Tokens in / out", "Cost", "Latency", "Cache"):
        box = table.locator("th", has_text=heading).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= LAPTOP["width"], heading
    row = table.locator("tbody tr").first
    expect(row).to_contain_text("checkout-service")
    expect(row).to_contain_text("Checkout")
    expect(row).to_contain_text("12.3k / 678")
    expect(row).to_contain_text("$0.00015")
    expect(row).to_contain_text("1.25 s")
    expect(table.locator(".tag-hit")).to_have_text("hit L1")
    screenshot(page, "logs-laptop")


def test_the_side_navigation_is_a_menu_on_a_phone(page, gateway, owner, traffic):
    page.set_viewport_size(PHONE)
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/dashboard/")

    navigation = page.get_by_role("navigation", name="Console")
    expect(navigation).to_be_hidden()
    page.get_by_text("Menu").click()
    expect(navigation).to_be_visible()
    screenshot(page, "menu-phone", full_page=False)
    navigation.get_by_role("link", name="Budgets").click()
    page.wait_for_url("**/console/budgets/")
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0

    page.set_viewport_size(LAPTOP)
    expect(page.get_by_role("navigation", name="Console")).to_be_visible()
    expect(page.locator(".sidenav a[aria-current=page]")).to_have_text("Budgets")


def test_money_reads_as_people_read_it_and_chart_labels_stay_inside_their_charts(
    page, gateway, owner, traffic
):
    page.set_viewport_size(LAPTOP)
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/dashboard/")

    spend = page.locator(".card", has_text="Spend").locator(".value")
    expect(spend).to_have_text("$0.00046")  # three requests of $0.00015321
    chart = page.locator("svg[aria-labelledby^=chart-spend-by-time]").first
    chart_box = chart.bounding_box()
    labels = chart.locator("text")
    assert labels.count() > 3
    for label in labels.all():
        box = label.bounding_box()
        assert box["x"] >= chart_box["x"] - 0.5, label.text_content()  # "$0.00015" not cut to ".00015"
    ticks = [label.text_content() for label in labels.all()]
    assert any(re.fullmatch(r"\$0\.000\d+", tick) for tick in ticks), ticks  # the axis in money


def test_the_browser_checks_a_teams_slug(page, gateway, owner, traffic):
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/teams/new")
    slug = page.locator("input[name=slug]")
    slug.fill("not a slug")
    # A pattern chromium cannot compile is ignored: the field would then read as valid.
    assert slug.evaluate("input => input.validity.patternMismatch") is True
    slug.fill("support_team-2")
    assert slug.evaluate("input => input.validity.valid") is True


def test_a_password_change_signs_the_other_browsers_out(browser, gateway, owner, traffic):
    here, elsewhere = browser.new_context(), browser.new_context()
    mine, other = here.new_page(), elsewhere.new_page()
    sign_in(mine, gateway, owner.user.email)
    sign_in(other, gateway, owner.user.email)

    mine.goto(f"{gateway}/console/account/")
    mine.get_by_label("Current password").fill(PASSWORD)
    mine.get_by_label("New password", exact=True).fill("a-much-longer-passphrase-2026")
    mine.get_by_label("New password, again").fill("a-much-longer-passphrase-2026")
    mine.get_by_role("button", name="Change password").click()
    expect(mine.locator(".messages")).to_contain_text("password")
    screenshot(mine, "account-password-changed")

    mine.goto(f"{gateway}/console/dashboard/")
    expect(mine.locator("h1")).to_have_text("Dashboard")  # the browser that changed it stays in
    other.goto(f"{gateway}/console/dashboard/")
    assert "/console/login/" in other.url
    sign_in(other, gateway, owner.user.email, "a-much-longer-passphrase-2026")
    expect(other.locator("h1")).to_have_text("Dashboard")
    here.close()
    elsewhere.close()


def test_a_webhooks_test_delivery_settles_on_the_page_with_its_reason(page, gateway, owner, traffic):
    webhook, _ = webhooks.webhook_create(
        organization=traffic, data={"url": f"https://127.0.0.1:{free_port()}/hooks/gateway"}
    )
    page.set_viewport_size(LAPTOP)
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/webhooks/{webhook.id}/")

    page.get_by_role("button", name="Send a test event").click()
    row = page.locator("tr[id^=delivery-]").first
    expect(row).to_contain_text("webhook.test")
    # No reload: the row asks for itself until the worker has tried (nobody listens on that port).
    expect(row).to_contain_text("failed", timeout=30_000)
    expect(row).to_contain_text("connection refused")
    assert row.get_attribute("hx-trigger") is None  # settled: it stopped asking
    screenshot(page, "webhook-test-delivery")
