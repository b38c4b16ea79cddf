"""In a browser, against a live gateway, its log ingest and a loopback provider: the playground streams
an answer through the proxy and leads to its log entry; the proxy's refusals are shown plainly; a
provider key is tested from its page."""

import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from apps.keys.models import ApiKey
from apps.outbox import spool
from apps.prompts import services as prompt_services
from apps.teams.models import TeamMembership
from tests.e2e.conftest import screenshot, sign_in, with_live_password
from tests.factories import MembershipFactory, TeamFactory
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import daphne_server_beside, until
from tests.upstreams import upstream  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Hello from upstream: Tell me about the sea"


@pytest.fixture(scope="module")
def outbox(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outbox")


@pytest.fixture(scope="module")
def gateway(django_db_setup, static_root, tmp_path_factory, outbox) -> str:
    """A live gateway whose log is written as in production: Daphne spools each request and an ingest
    process writes the spool to the database (under `make run`, the Celery worker's thread does)."""
    env = {"GATEWAY_OUTBOX_DIR": str(outbox), "STATIC_ROOT": str(static_root)}
    ingest = [sys.executable, "manage.py", "outbox_ingest", "--interval", "0.1"]
    with daphne_server_beside(tmp_path_factory.mktemp("gateway"), ingest, **env) as base_url:
        yield base_url


@pytest.fixture(autouse=True)
def _log_written(outbox):
    """Each test ends once the ingest has written what it spooled: the database is emptied after the
    test, and an ingest writing at that moment would stop the emptying."""
    yield
    time.sleep(0.5)  # a request's record is spooled just after its answer, and sealed within 0.2 s
    assert until(lambda: not spool.waiting_files(outbox), 20)


@pytest.fixture
def admin(organization):
    return with_live_password(MembershipFactory(organization=organization, role="admin"))


@pytest.fixture
def routed(organization, upstream):  # noqa: F811
    add_alias(organization, "chat", ("openai", "gpt-4o-mini"))
    return add_provider_key(organization, upstream, secret="sk-upstream-playground-e2e-9931", name="primary")


def test_the_playground_streams_an_answer_and_opens_its_log_entry(
    page,
    gateway,
    admin,
    organization,
    routed,
    upstream,  # noqa: F811
):
    research = TeamFactory(organization=organization, name="Research")
    TeamMembership.objects.create(team=research, user=admin.user)
    upstream.behave("slow", delay=0.25)  # each event a quarter of a second after the last
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/playground/")
    expect(page.get_by_label("Charged to")).to_have_value(str(research.id))
    page.get_by_label("Message", exact=True).fill("Tell me about the sea")
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    screenshot(page, "playground-empty")
    # Every text the answer shows on its way, to tell a stream from an answer that arrives whole.
    page.evaluate(
        """() => {
          window.answerSeen = [];
          const answer = document.getElementById("playground-answer");
          new MutationObserver(() => window.answerSeen.push(answer.textContent))
            .observe(answer, {childList: true, characterData: true, subtree: true});
        }"""
    )

    page.get_by_role("button", name="Send").click()

    expect(page.locator("#playground-status")).to_contain_text("streamed in", timeout=15_000)
    expect(page.locator("#playground-answer")).to_have_text(ANSWER)
    seen = [text for text in page.evaluate("window.answerSeen") if text]
    assert len(set(seen)) >= 3, seen
    assert all(ANSWER.startswith(text) for text in seen)
    expect(page.locator("#playground-status")).to_contain_text("HTTP 200")
    expect(page.locator("#playground-key-state")).to_contain_text(f"Playground · {admin.user.email}")
    summary = page.locator("#playground-summary")
    expect(summary).to_contain_text("openai · gpt-4o-mini")
    # A stream's cost comes in its closing comment, not in a header.
    expect(summary.locator("dd[title^='$0.0000']")).to_have_count(1)
    request_id = page.locator("#playground-header-rows tr", has_text="x-gateway-request-id").locator("td")
    expect(request_id).to_be_visible()
    log_id = request_id.inner_text()

    api_key = ApiKey.objects.get(name=f"Playground · {admin.user.email}")
    assert (api_key.team, api_key.permissions) == (research, ["proxy:chat"])

    link = page.get_by_role("link", name="Open the log entry")
    expect(link).to_be_visible(timeout=20_000)
    page.evaluate("window.scrollTo(0, 0)")  # the side navigation sticks to the top
    screenshot(page, "playground")
    link.click()
    page.wait_for_url(f"**/console/logs/{log_id}/")
    expect(page.locator("h1").first).to_be_visible()
    expect(page.get_by_text(log_id).first).to_be_visible()
    assert errors == []


def test_the_proxys_refusals_are_shown_plainly(
    page,
    gateway,
    admin,
    routed,
    upstream,  # noqa: F811
):
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/playground/")
    page.get_by_label("A key of your own").check()
    page.get_by_label("API key").fill("sk-this-is-no-key-of-the-gateway")
    page.get_by_label("Message", exact=True).fill("hello")
    page.get_by_role("button", name="Send").click()
    error = page.locator("#playground-error")
    expect(error).to_contain_text("HTTP 401")
    expect(error).to_contain_text("invalid_api_key")

    page.get_by_label("A key made for you").check()
    page.get_by_label("Stream the answer").uncheck()
    upstream.behave("status", status=400, message="The model refuses this prompt.", times=1)
    page.get_by_role("button", name="Send").click()
    expect(error).to_contain_text("HTTP 400")
    expect(error).to_contain_text("The model refuses this prompt.")
    expect(page.get_by_role("link", name="Open the log entry")).to_be_visible(timeout=20_000)  # errors too
    page.evaluate("window.scrollTo(0, 0)")  # the side navigation sticks to the top
    screenshot(page, "playground-error")


def test_a_prompt_template_version_is_sent_with_its_variables(
    page,
    gateway,
    admin,
    organization,
    routed,
    upstream,  # noqa: F811
):
    template = prompt_services.template_create(
        organization=organization, data={"slug": "greeter", "name": "Greeter"}
    )
    prompt_services.version_create(
        template=template,
        data={
            "messages": [{"role": "user", "content": "Say {{word}} to {{whom}}"}],
            "variables": [{"name": "word"}, {"name": "whom", "default": "everyone"}],
            "defaults": {"model": "chat"},
        },
    )
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/playground/")
    page.get_by_label("A prompt template").check()
    page.locator("select[name=prompt_template]").select_option(label="Greeter (greeter)")
    expect(page.locator("select[name=prompt_version]")).to_have_value("1")  # no production label: the newest
    page.locator("textarea[name=var_word]").fill("ahoy")
    page.locator("select[name=model]").select_option(label="The prompt template's model")
    page.get_by_role("button", name="Send").click()

    expect(page.locator("#playground-answer")).to_have_text("Hello from upstream: Say ahoy to everyone")
    sent = upstream.last_request.json
    assert sent["messages"] == [{"role": "user", "content": "Say ahoy to everyone"}]


def test_the_playground_fits_a_phone(page, gateway, admin, routed):
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/playground/")
    expect(page.get_by_role("heading", name="Playground")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    screenshot(page, "playground-phone")


def test_an_admin_tests_a_provider_key_from_its_page(
    page,
    gateway,
    admin,
    routed,
    upstream,  # noqa: F811
):
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/provider-keys/{routed.id}/")
    page.get_by_role("button", name="Test this key").click()
    outcome = page.locator("#upstream-check")
    expect(outcome).to_contain_text("The key works: the upstream listed 3 models.")
    expect(outcome).to_contain_text("HTTP 200 in")

    upstream.behave("status", status=401)
    page.get_by_role("button", name="Test this key").click()
    expect(outcome).to_contain_text("HTTP 401")
    expect(outcome).to_contain_text("Incorrect API key provided.")
    page.evaluate("window.scrollTo(0, 0)")  # the side navigation sticks to the top
    screenshot(page, "provider-key-test")


def test_a_newcomers_first_request_needs_only_a_provider_key(
    page,
    gateway,
    admin,
    organization,
    upstream,  # noqa: F811
):
    """The first run as a newcomer meets it: signed in, a provider key added on its page, the first
    request sent from the playground to one of that provider's models by name (no alias made), and
    found in the logs."""
    sign_in(page, gateway, admin.user.email)
    page.goto(f"{gateway}/console/dashboard/")
    expect(page.get_by_text("No requests in this period")).to_be_visible()
    page.get_by_role("link", name="Providers").first.click()
    page.get_by_role("link", name="Add a provider key").click()
    page.get_by_label("Name").fill("first")
    page.get_by_label("Secret").fill("sk-upstream-newcomer-e2e-4412")
    page.get_by_label("Base URL").fill(upstream.openai_base_url)
    page.get_by_label("Data region").fill("us")
    page.get_by_role("button", name="Add the key").click()
    expect(page.locator(".messages")).to_be_visible()

    page.get_by_role("navigation", name="Console").get_by_role("link", name="Playground").click()
    page.get_by_label("Model").select_option("openai/gpt-4o-mini")
    page.get_by_label("Message", exact=True).fill("Tell me about the sea")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#playground-answer")).to_have_text(ANSWER, timeout=15_000)
    link = page.get_by_role("link", name="Open the log entry")
    expect(link).to_be_visible(timeout=20_000)

    page.get_by_role("navigation", name="Console").get_by_role("link", name="Logs").click()
    row = page.locator("table.log-table tbody tr").first
    expect(row).to_contain_text("openai/gpt-4o-mini")
    expect(row).to_contain_text(f"Playground · {admin.user.email}")
