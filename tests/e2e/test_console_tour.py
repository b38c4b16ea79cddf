"""Every console page in a browser, on an organization with something in every area: each answers 200,
runs without a script error, and is photographed (docs/console.md shows the pictures). Then a chart
is read and the log filtered, as an admin would."""

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.experiments import services as experiments
from apps.limits.services import limits_set
from apps.policies import services as policies
from apps.sso import services as sso
from apps.webhooks import services as webhooks
from tests.audit.entries import AuditEntryFactory
from tests.e2e.conftest import screenshot, sign_in, with_live_password
from tests.experiments.conftest import make_alias, model_experiment
from tests.experiments.test_results import CONTROL, LARGE, entries
from tests.factories import TeamFactory, create_api_key, create_provider_key
from tests.prompts.conftest import make_template

pytestmark = pytest.mark.django_db(transaction=True)

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}

MODELS = (("openai", "gpt-4o-mini"), ("openai", "gpt-4o"), ("anthropic", "claude-3-5-haiku"))
CACHE_TIERS = ("miss", "miss", "miss", "l1", "l2", "l3")


@pytest.fixture
def showcase(owner):
    """The owner's organization with keys, teams, providers, models, policies, a template, a running
    experiment with results, a webhook, an SSO connection and a week of traffic."""
    organization = owner.organization
    with_live_password(owner)
    research = TeamFactory(organization=organization, name="Research", slug="research")
    support = TeamFactory(organization=organization, name="Support", slug="support")
    limits_set(
        organization=organization, team=research, budget={"amount_usd": Decimal("50"), "period": "monthly"}
    )
    limits_set(organization=organization, budget={"amount_usd": Decimal("500"), "period": "monthly"})
    key, _ = create_api_key(organization, name="search-indexer", team=research)
    create_api_key(organization, name="support-bot", team=support, rate_limits={"rpm": 120, "tpm": None})
    # The provider's default address (api.openai.com): the service resolves a base URL it is given.
    provider_key = create_provider_key(organization, name="primary")
    make_alias(organization, "chat", "gpt-4o-mini")
    make_alias(organization, "chat-large", "gpt-4o")
    policies.policy_create(
        organization=organization,
        data={"name": "pii", "action": "redact", "detectors": ["email", "payment_card"]},
    )
    policies.policy_create(
        organization=organization, data={"name": "no-secrets", "action": "block", "terms": ["project titan"]}
    )
    template = make_template(organization, "support", versions=2)
    experiment = model_experiment(organization, name="bigger model")
    experiments.experiment_start(experiment=experiment)
    entries(organization, experiment, "control", CONTROL)
    entries(organization, experiment, "large", LARGE)
    webhook, _ = webhooks.webhook_create(
        organization=organization, data={"url": "https://127.0.0.1:9/hooks/gateway"}
    )
    connection = sso.sso_connection_create(
        organization=organization,
        data=dict(
            name="Okta",
            issuer="https://acme.okta.com/oauth2/default",
            client_id="0oa1b2c3",
            client_secret="an-okta-client-secret",
            allowed_domains=["acme.com"],
        ),
    )
    now = timezone.now()
    chosen = random.Random(7)
    log = []
    for hour in range(0, 7 * 24, 3):
        provider, model = chosen.choice(MODELS)
        team = chosen.choice((research, support, None))
        log.append(
            AuditEntryFactory(
                organization=organization,
                created_at=now - timedelta(hours=hour, minutes=chosen.randint(0, 59)),
                provider=provider,
                model=model,
                requested_model="chat",
                team_id=team.id if team else None,
                api_key_id=key.id,
                api_key_prefix=key.key_prefix,
                status=chosen.choice((200,) * 12 + (429, 502)),
                cache=chosen.choice(CACHE_TIERS),
                latency_ms=chosen.uniform(80, 1400),
                cost_usd=Decimal(chosen.randint(20, 9000)) / Decimal(1_000_000),
                input_tokens=chosen.randint(50, 2000),
                output_tokens=chosen.randint(10, 600),
            )
        )
    return {
        "api-key": f"/console/api-keys/{key.id}/",
        "provider-key": f"/console/provider-keys/{provider_key.id}/",
        "team": f"/console/teams/{research.id}/",
        "prompt": f"/console/prompts/{template.id}/",
        "prompt-version": f"/console/prompts/{template.id}/versions/1/",
        "experiment": f"/console/experiments/{experiment.id}/",
        "experiment-results": f"/console/experiments/{experiment.id}/results",
        "webhook": f"/console/webhooks/{webhook.id}/",
        "log-entry": f"/console/logs/{log[0].id}/",
        "sso-connection": f"/console/sso/{connection.id}/",
    }


PAGES = (
    ("dashboard", "/console/dashboard/"),
    ("api-keys", "/console/api-keys/"),
    ("api-key-create", "/console/api-keys/new"),
    ("provider-keys", "/console/provider-keys/"),
    ("provider-key-create", "/console/provider-keys/new"),
    ("models", "/console/models/"),
    ("model-prices", "/console/models/prices/"),
    ("teams", "/console/teams/"),
    ("policies", "/console/policies/"),
    ("policy-dry-run-empty", "/console/policies/dry-run"),
    ("prompts", "/console/prompts/"),
    ("experiments", "/console/experiments/"),
    ("logs", "/console/logs/"),
    ("budgets", "/console/budgets/"),
    ("playground", "/console/playground/"),
    ("tail", "/console/tail/"),
    ("webhooks", "/console/webhooks/"),
    ("webhook-deliveries", "/console/webhooks/deliveries/"),
    ("organization-settings", "/console/organization/settings/"),
    ("organization-members", "/console/organization/members/"),
    ("sso-connections", "/console/sso/"),
    ("account", "/console/account/"),
    ("account-tokens", "/console/account/tokens"),
)


def test_every_console_page_renders_in_a_browser(page, gateway, owner, showcase):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{gateway}/console/login/")
    screenshot(page, "login")
    sign_in(page, gateway, owner.user.email)
    for name, path in (*PAGES, *showcase.items()):
        page.set_viewport_size(LAPTOP)
        response = page.goto(f"{gateway}{path}")
        assert response.status == 200, f"{name}: {response.status}"
        expect(page.locator("h1").first).to_be_visible()
        screenshot(page, name)
        # And as a phone shows it: the page's first screen, nothing wider than the screen.
        page.set_viewport_size(PHONE)
        expect(page.locator("h1").first).to_be_visible()
        screenshot(page, f"{name}-phone", full_page=False)
    assert errors == []


def test_the_policy_dry_run_shows_what_the_policies_would_do(page, gateway, owner, showcase):
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/policies/dry-run")
    page.get_by_label("Sample request").fill("Please mail the invoice to ada@example.com")
    page.locator("input[name=model]").fill("chat")
    page.get_by_role("button", name="Run").click()
    expect(page.get_by_text("[REDACTED:email]").first).to_be_visible()
    screenshot(page, "policy-dry-run")


def test_an_admin_reads_a_chart_and_filters_the_log(page, gateway, owner, showcase):
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/dashboard/")
    charts = page.locator("svg[role=img]")
    assert charts.count() >= 4  # by day, team, model, provider
    by_model = page.locator("svg[role=img]", has_text="gpt-4o-mini").first
    expect(by_model).to_be_visible()
    assert by_model.locator("rect").count() >= 3

    page.goto(f"{gateway}/console/logs/")
    page.get_by_label("Model", exact=True).fill("claude-3-5-haiku")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/console/logs/?*model=claude-3-5-haiku*")
    rows = page.locator("table tbody tr")
    assert rows.count() >= 1
    for row in rows.all():  # what served it is the model cell's title
        expect(row.locator(".log-model")).to_have_attribute("title", "served by anthropic / claude-3-5-haiku")
    screenshot(page, "logs-filtered")


def test_the_dashboard_is_readable_at_phone_width(page, gateway, owner, showcase):
    page.set_viewport_size(PHONE)
    sign_in(page, gateway, owner.user.email)
    page.goto(f"{gateway}/console/dashboard/")
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0
    screenshot(page, "dashboard-phone-whole")


def test_the_read_only_pages_work_without_javascript(browser, gateway, owner, showcase):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, gateway, owner.user.email)  # a plain form post
    for path in (
        "/console/dashboard/",
        "/console/api-keys/",
        "/console/logs/",
        showcase["experiment-results"],
    ):
        response = page.goto(f"{gateway}{path}")
        assert response.status == 200
        expect(page.locator("h1").first).to_be_visible()
    page.goto(f"{gateway}/console/dashboard/")
    assert page.locator("svg[role=img]").count() >= 4  # the charts are drawn on the server
    page.goto(f"{gateway}/console/tail/")
    expect(page.get_by_text("Live updates need JavaScript")).to_be_visible()
    expect(page.locator("#tail-rows tr[data-log-id]").first).to_be_visible()  # the latest, from the server
    context.close()
