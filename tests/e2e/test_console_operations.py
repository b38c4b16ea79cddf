"""In a browser, against a live gateway and a loopback provider: rotate a provider key with no gap,
and set a team budget that the proxy then holds."""

from decimal import Decimal

import httpx
import pytest
from playwright.sync_api import expect

from apps.limits.models import Limits
from tests.e2e.conftest import screenshot, sign_in, with_live_password
from tests.factories import MembershipFactory, TeamFactory, create_api_key
from tests.proxy.conftest import add_alias, add_provider_key, bearer
from tests.upstreams import upstream  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}


@pytest.fixture
def admin(organization):
    return with_live_password(MembershipFactory(organization=organization, role="admin"))


@pytest.fixture
def routed(organization, upstream):  # noqa: F811
    provider_key = add_provider_key(organization, upstream, secret="sk-upstream-old-1111", name="primary")
    add_alias(organization, "chat", ("openai", "gpt-4o-mini"))
    return provider_key


def chat(gateway: str, secret: str) -> httpx.Response:
    return httpx.post(f"{gateway}/v1/chat/completions", json=CHAT, headers=bearer(secret), timeout=10)


def test_an_admin_rotates_a_provider_key_and_the_next_request_uses_the_new_secret(
    page,
    gateway,
    admin,
    organization,
    routed,
    upstream,  # noqa: F811
):
    _, secret = create_api_key(organization)
    assert chat(gateway, secret).status_code == 200
    assert upstream.requests[-1].credential == "sk-upstream-old-1111"

    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/provider-keys/")
    screenshot(page, "provider-keys")
    page.get_by_role("link", name="OpenAI").click()
    page.get_by_label("New secret").fill("sk-upstream-new-2222")
    page.get_by_role("button", name="Rotate").click()
    expect(page.get_by_text("Rotated: the key now ends in …2222")).to_be_visible()
    assert "sk-upstream-new-2222" not in page.content() and "sk-upstream-old-1111" not in page.content()
    screenshot(page, "provider-key-detail")

    assert chat(gateway, secret).status_code == 200
    assert upstream.requests[-1].credential == "sk-upstream-new-2222"


def test_a_team_budget_set_in_the_console_is_held_by_the_proxy(
    page,
    gateway,
    admin,
    organization,
    routed,
    upstream,  # noqa: F811
):
    team = TeamFactory(organization=organization, name="Research")
    _, secret = create_api_key(organization, team=team)
    assert chat(gateway, secret).status_code == 200

    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/teams/")
    screenshot(page, "teams")
    page.get_by_role("link", name="Research").click()
    page.get_by_label("Amount (USD)").fill("0.000001")
    page.get_by_label("Period").select_option("daily")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved Research.")).to_be_visible()
    screenshot(page, "team-detail")
    assert Limits.objects.get(team=team).budget_usd == Decimal("0.000001")

    refused = chat(gateway, secret)
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "budget_exceeded"


def test_the_live_tail_shows_a_request_sent_through_the_proxy_as_it_finishes(
    page,
    gateway,
    admin,
    organization,
    routed,
    upstream,  # noqa: F811
):
    _, secret = create_api_key(organization, name="tail-watcher")
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/tail/")
    expect(page.locator("#tail-state")).to_have_attribute("data-state", "live")
    expect(page.locator("#tail-rows tr[data-log-id]")).to_have_count(0)

    answered = chat(gateway, secret)
    assert answered.status_code == 200
    request_id = answered.headers["x-gateway-request-id"]

    row = page.locator(f'#tail-rows tr[data-log-id="{request_id}"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("chat")
    expect(row.locator(".log-model")).to_have_attribute("title", "served by openai / gpt-4o-mini")
    expect(row).to_contain_text("tail-watcher")  # the key by its name
    expect(row).to_contain_text("200")
    screenshot(page, "tail")
