"""In a browser: sign in, create a key (shown once, copied), set its budget, revoke it, and see the
proxy refuse it."""

import httpx
import pytest
from playwright.sync_api import expect

from apps.keys.models import ApiKey
from apps.limits.models import Limits
from tests.e2e.conftest import screenshot, sign_in, with_live_password
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def admin(organization):
    return with_live_password(MembershipFactory(organization=organization, role="admin"))


def test_an_admin_creates_budgets_and_revokes_a_key(page, gateway, admin):
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/api-keys/")
    screenshot(page, "api-keys-empty")

    page.get_by_role("link", name="Create a key").click()
    page.get_by_label("Name").fill("checkout-service")
    screenshot(page, "api-key-create")
    page.get_by_role("button", name="Create the key").click()

    secret_field = page.get_by_label("The new API key")
    expect(secret_field).to_be_visible()
    secret = secret_field.input_value()
    expect(page.get_by_text("shown only once")).to_be_visible()
    screenshot(page, "api-key-created")
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()

    # The key works at the proxy.
    models = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert models.status_code == 200

    page.get_by_role("link", name="Done: open the key").click()
    assert secret not in page.content()
    page.get_by_label("Amount (USD)").fill("40")
    page.get_by_label("Period").select_option("weekly")
    page.get_by_label("Requests per minute").fill("120")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved checkout-service.")).to_be_visible()
    expect(page.get_by_text("$40.00 weekly")).to_be_visible()
    screenshot(page, "api-key-detail")
    api_key = ApiKey.objects.get(name="checkout-service")
    limits = Limits.objects.get(api_key=api_key)
    assert (limits.budget_usd, limits.budget_period, limits.rpm) == (40, "weekly", 120)

    page.get_by_role("button", name="Revoke checkout-service").click()
    expect(page.get_by_text("revoked", exact=True)).to_be_visible()
    refused = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {secret}"})
    assert refused.status_code == 401

    page.goto(f"{gateway}/console/api-keys/")
    expect(page.get_by_role("link", name="checkout-service")).to_be_visible()
    screenshot(page, "api-keys")


def test_a_member_sees_the_keys_but_no_way_to_change_them(page, gateway, organization):
    member = with_live_password(MembershipFactory(organization=organization, role="member"))
    sign_in(page, gateway, member.user.email)
    page.goto(f"{gateway}/console/api-keys/")
    expect(page.get_by_role("heading", name="API keys")).to_be_visible()
    expect(page.get_by_role("link", name="Create a key")).to_have_count(0)
    page.goto(f"{gateway}/console/api-keys/new")
    expect(page.get_by_text("This needs the admin role")).to_be_visible()


def test_the_console_is_readable_at_phone_width(page, gateway, admin):
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/api-keys/")
    # Nothing wider than the screen but the table, which scrolls inside its own box.
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    screenshot(page, "api-keys-phone")
