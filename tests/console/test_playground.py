"""The console's playground (its page, the short-lived key it makes, the prompt picker, the log entry it
waits for) and a provider key's "test this key", against the loopback stand-in provider."""

import asyncio
import re
import uuid
from datetime import timedelta

import httpx
import pytest
from django.test import Client
from django.utils import timezone

from apps.catalog.selectors import CHAT_MODEL_SUGGESTIONS
from apps.keys.models import ApiKey
from apps.keys.secrets import api_key_digest
from apps.prompts import services as prompt_services
from apps.proxy.upstream import close_sessions
from apps.teams.models import TeamMembership
from gateway_project.asgi import application
from tests.audit.entries import AuditEntryFactory
from tests.console.conftest import csrf_token
from tests.factories import ModelAliasFactory, TeamFactory, create_provider_key
from tests.proxy.conftest import add_alias, add_provider_key, bearer
from tests.servers import free_port
from tests.upstreams import upstream  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

PAGE = "/console/playground/"
MAKE_KEY = "/console/playground/key"
PROVIDER_SECRET = "sk-upstream-playground-4f8Q2m7Zt1"


def make_key(client: Client, **data):
    return client.post(MAKE_KEY, {**data, "csrfmiddlewaretoken": csrf_token(client, PAGE)})


def join_team(client: Client, team) -> None:
    TeamMembership.objects.create(team=team, user=client.membership.user)


# --- The page -----------------------------------------------------------------------------------


def test_the_page_offers_the_organizations_active_models_and_templates_and_no_others(
    console_for, organization, outsider
):
    ModelAliasFactory(organization=organization, alias="chat-fast")
    ModelAliasFactory(organization=organization, alias="chat-retired", is_active=False)
    ModelAliasFactory(organization=outsider.organization, alias="their-model")
    support = prompt_services.template_create(
        organization=organization, data={"slug": "support", "name": "Support"}
    )
    prompt_services.version_create(template=support, data={"messages": [{"role": "user", "content": "hi"}]})
    prompt_services.template_create(organization=organization, data={"slug": "empty", "name": "No versions"})
    theirs = prompt_services.template_create(
        organization=outsider.organization, data={"slug": "theirs", "name": "Theirs"}
    )
    prompt_services.version_create(template=theirs, data={"messages": [{"role": "user", "content": "x"}]})

    page = console_for(organization, "member").get(PAGE).content.decode()

    assert '<option value="chat-fast">' in page
    assert "chat-retired" not in page and "their-model" not in page
    assert "Support (support)" in page
    assert "No versions" not in page and "Theirs" not in page
    assert 'src="/static/console/playground.js"' in page


def test_without_an_alias_the_models_of_the_organizations_providers_are_offered_by_name(
    console_for, organization, outsider
):
    create_provider_key(organization, provider="anthropic")
    disabled = create_provider_key(organization, provider="openai")
    disabled.is_active = False
    disabled.save(update_fields=["is_active"])
    create_provider_key(outsider.organization, provider="openai")

    page = console_for(organization, "member").get(PAGE).content.decode()

    offered = re.findall(r'<option value="([a-z_]+/[^"]+)">', page)
    assert offered == [f"anthropic/{model}" for model in CHAT_MODEL_SUGGESTIONS["anthropic"]]
    assert "No models yet" not in page


def test_with_no_provider_key_the_page_says_where_models_come_from(console_for, organization):
    page = console_for(organization, "member").get(PAGE).content.decode()
    assert "No models yet" in page and 'href="/console/provider-keys/"' in page


def test_a_member_is_offered_only_a_key_of_their_own(console_for, organization):
    page = console_for(organization, "member").get(PAGE).content.decode()
    assert "A key made for you" not in page
    assert "paste a key you were given" in page


def test_an_admin_is_offered_a_key_charged_to_their_own_teams_only(console_for, organization):
    client = console_for(organization, "admin")
    research = TeamFactory(organization=organization, name="Research")
    TeamFactory(organization=organization, name="Sales")
    join_team(client, research)
    page = client.get(PAGE).content.decode()
    assert "A key made for you: chat completions only, for 15 minutes" in page
    assert f'<option value="{research.id}">Research</option>' in page
    assert "Sales" not in page


def test_the_page_needs_a_signed_in_member(organization):
    response = Client().get(PAGE)
    assert response.status_code == 302 and "/console/login/" in response["Location"]


# --- The short-lived key ---------------------------------------------------------------------


def test_an_admin_gets_a_chat_key_for_fifteen_minutes_charged_to_their_team(console_for, organization):
    client = console_for(organization, "admin")
    team = TeamFactory(organization=organization)
    join_team(client, team)
    before = timezone.now()

    response = make_key(client, team_id=str(team.id))

    assert response.status_code == 201
    assert "no-cache" in response["Cache-Control"]
    made = response.json()
    api_key = ApiKey.objects.get(key_digest=api_key_digest(made["key"]))
    user = client.membership.user
    assert made["name"] == api_key.name == f"Playground · {user.email}"
    assert made["team"] == team.name
    assert (api_key.organization, api_key.team, api_key.created_by) == (organization, team, user)
    assert api_key.permissions == ["proxy:chat"]
    assert before + timedelta(minutes=15) <= api_key.expires_at <= timezone.now() + timedelta(minutes=15)
    assert made["expires_at"] == api_key.expires_at.isoformat()
    assert api_key.status == "active"


def test_a_new_key_ends_the_persons_expired_ones_and_leaves_a_live_one_working(
    console_for, organization, time_machine
):
    client = console_for(organization, "owner")
    time_machine.move_to(timezone.now(), tick=False)
    expired = make_key(client, team_id="").json()
    time_machine.shift(timedelta(minutes=16))
    live = make_key(client, team_id="").json()  # another tab's, say
    newest = make_key(client, team_id="").json()

    status = {key.key_digest: key.status for key in ApiKey.objects.filter(created_by=client.membership.user)}
    assert status == {
        api_key_digest(expired["key"]): "revoked",
        api_key_digest(live["key"]): "active",
        api_key_digest(newest["key"]): "active",
    }


def test_without_a_team_the_key_is_charged_to_the_organization(console_for, organization):
    client = console_for(organization, "owner")
    made = make_key(client, team_id="").json()
    assert ApiKey.objects.get(key_digest=api_key_digest(made["key"])).team is None


@pytest.mark.parametrize("whose", ["another team of the organization", "a team of another organization"])
def test_a_team_the_admin_is_not_in_is_refused_and_no_key_is_made(console_for, organization, outsider, whose):
    client = console_for(organization, "admin")
    if whose == "another team of the organization":
        team = TeamFactory(organization=organization)
    else:
        team = TeamFactory(organization=outsider.organization)
        TeamMembership.objects.create(team=team, user=client.membership.user)  # even as its member

    response = make_key(client, team_id=str(team.id))

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "Invalid value for 'team_id': Choose one of your own teams, or none."
    )
    assert not ApiKey.objects.exists()


def test_a_member_cannot_have_a_key_made(console_for, organization):
    response = make_key(console_for(organization, "member"))
    assert response.status_code == 403
    assert not ApiKey.objects.exists()


def test_a_key_is_made_only_with_the_csrf_token(console_for, organization):
    response = console_for(organization, "admin").post(MAKE_KEY, {})
    assert response.status_code == 403
    assert not ApiKey.objects.exists()


def test_the_key_is_listed_in_its_organization_only(console_for, organization, outsider):
    made = make_key(console_for(organization, "admin")).json()
    api_key = ApiKey.objects.get(key_digest=api_key_digest(made["key"]))

    ours = console_for(organization, "member")
    assert made["name"] in ours.get("/console/api-keys/").content.decode()
    theirs = console_for(outsider.organization, "owner")
    assert made["name"] not in theirs.get("/console/api-keys/").content.decode()
    assert theirs.get(f"/console/api-keys/{api_key.id}/").status_code == 404


def proxy_calls(calls):
    """Runs ``calls(client)`` against the gateway's ASGI application in this process."""

    async def run():
        transport = httpx.ASGITransport(app=application, client=("203.0.113.7", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=30) as client:
            try:
                return await calls(client)
            finally:
                await close_sessions()

    return asyncio.run(run())


@pytest.mark.django_db(transaction=True)
def test_the_key_calls_its_organizations_models_only_and_is_refused_once_expired(
    console_for,
    organization,
    outsider,
    upstream,  # noqa: F811
    time_machine,
):
    add_provider_key(organization, upstream, secret="sk-upstream-ours-0001")
    add_alias(organization, "chat", ("openai", "gpt-4o-mini"))
    add_provider_key(outsider.organization, upstream, secret="sk-upstream-theirs-0002")
    add_alias(outsider.organization, "their-chat", ("openai", "gpt-4o-mini"))
    their_team = TeamFactory(organization=outsider.organization)
    secret = make_key(console_for(organization, "admin")).json()["key"]

    def chat(model: str, **headers):
        body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
        return lambda client: client.post(
            "/v1/chat/completions", json=body, headers={**bearer(secret), **headers}
        )

    assert proxy_calls(chat("chat")).status_code == 200
    assert upstream.last_request.credential == "sk-upstream-ours-0001"
    assert proxy_calls(chat("their-chat")).json()["error"]["code"] == "model_not_found"
    refused = proxy_calls(chat("chat", **{"x-gateway-team": str(their_team.id)}))
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "team_not_found")
    # Chat completions only.
    assert proxy_calls(lambda client: client.get("/v1/models", headers=bearer(secret))).status_code == 403

    time_machine.move_to(timezone.now() + timedelta(minutes=15, seconds=1), tick=True)
    assert proxy_calls(chat("chat")).status_code == 401


# --- The prompt picker -----------------------------------------------------------------------


@pytest.fixture
def support(organization):
    template = prompt_services.template_create(
        organization=organization, data={"slug": "support", "name": "Support"}
    )
    prompt_services.version_create(
        template=template,
        data={
            "messages": [{"role": "user", "content": "Answer {{question}} in {{language}}."}],
            "variables": [{"name": "question"}, {"name": "language", "default": "English"}],
            "defaults": {"model": "chat-fast"},
        },
    )
    prompt_services.version_create(
        template=template,
        data={"messages": [{"role": "user", "content": "Say {{word}}."}], "variables": [{"name": "word"}]},
    )
    prompt_services.label_set(template=template, name="production", version=1)
    return template


def test_a_template_opens_at_its_production_version_with_its_variables(console_for, organization, support):
    client = console_for(organization, "member")
    fields = client.get("/console/playground/prompt", {"prompt_template": str(support.id)}).content.decode()
    assert '<option value="production" selected>production (version 1)</option>' in fields
    assert '<option value="2">version 2</option>' in fields
    assert 'name="var_question"' in fields and 'placeholder="required"' in fields
    assert 'placeholder="empty: the default, English"' in fields
    assert "<code>chat-fast</code>" in fields

    other = client.get(
        "/console/playground/prompt", {"prompt_template": str(support.id), "prompt_version": "2"}
    )
    assert 'name="var_word"' in other.content.decode() and "var_question" not in other.content.decode()


def test_another_organizations_template_is_not_found(console_for, outsider, support):
    client = console_for(outsider.organization, "owner")
    assert client.get("/console/playground/prompt", {"prompt_template": str(support.id)}).status_code == 404
    assert client.get("/console/playground/prompt", {"prompt_template": "not-an-id"}).status_code == 404


# --- The log entry ---------------------------------------------------------------------------


def test_the_log_entry_is_awaited_then_summarised_with_its_link(console_for, organization):
    client = console_for(organization, "member")
    request_id = uuid.uuid4()
    url = f"/console/playground/entries/{request_id}"

    waiting = client.get(url).content.decode()
    assert "Recording the log entry" in waiting
    assert f'hx-get="{url}?polls=1"' in waiting and 'hx-trigger="load delay:1s"' in waiting

    AuditEntryFactory(
        id=request_id,
        organization=organization,
        status=200,
        cost_usd="0.00002550",
        cache="miss",
        policy_action="redacted",
        policy_reason="pii · email",
    )
    recorded = client.get(f"{url}?polls=3").content.decode()
    assert f'href="/console/logs/{request_id}/"' in recorded
    assert "$0.000026" in recorded
    assert 'title="$0.00002550"' in recorded
    assert "redacted · pii · email" in recorded


def test_the_page_stops_waiting_and_points_at_the_logs(console_for, organization):
    request_id = uuid.uuid4()
    page = console_for(organization, "member").get(f"/console/playground/entries/{request_id}?polls=30")
    text = page.content.decode()
    assert "hx-get" not in text
    assert f'href="/console/logs/?request_id={request_id}"' in text


@pytest.mark.parametrize("polls", ["²", "1" * 5000, "-1", "x"])
def test_an_odd_count_of_looks_starts_over_rather_than_failing(console_for, organization, polls):
    page = console_for(organization, "member").get(
        f"/console/playground/entries/{uuid.uuid4()}?polls={polls}"
    )
    assert page.status_code == 200 and "Recording the log entry" in page.content.decode()


def test_another_organizations_entry_reads_as_not_recorded(console_for, organization, outsider):
    theirs = AuditEntryFactory(organization=outsider.organization)
    page = console_for(organization, "owner").get(f"/console/playground/entries/{theirs.id}").content.decode()
    assert "Recording the log entry" in page and "/console/logs/" + str(theirs.id) not in page


# --- A provider key's "test this key" --------------------------------------------------------


def key_page(key) -> str:
    return f"/console/provider-keys/{key.id}/"


def press_test_this_key(client: Client, key, *, htmx: bool = True):
    """Presses the key page's button: with htmx (the fragment swapped in), or as a plain form."""
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    token = csrf_token(client, key_page(key))
    return client.post(f"{key_page(key)}test", {"csrfmiddlewaretoken": token}, **headers)


def test_a_working_key_shows_its_latency_in_place(console_for, organization, upstream):  # noqa: F811
    key = add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    response = press_test_this_key(console_for(organization, "admin"), key)

    assert response.status_code == 200
    text = response.content.decode()
    assert "<html" not in text  # the fragment htmx swaps in
    assert "works" in text and "the upstream listed 3 models" in text and " ms." in text
    assert f"GET <code>{upstream.openai_base_url}/models</code>" in text
    assert PROVIDER_SECRET not in text
    request = upstream.last_request
    assert (request.method, request.path, request.credential) == ("GET", "/v1/models", PROVIDER_SECRET)


def test_an_anthropic_key_is_tested_with_anthropics_headers(console_for, organization, upstream):  # noqa: F811
    key = add_provider_key(organization, upstream, provider="anthropic", secret=PROVIDER_SECRET)
    text = press_test_this_key(console_for(organization, "admin"), key).content.decode()
    assert "the upstream listed 3 models" in text
    assert upstream.last_request.headers["x-api-key"] == PROVIDER_SECRET
    assert upstream.last_request.headers["anthropic-version"] == "2023-06-01"


def test_a_refused_key_shows_the_upstreams_status_and_message_without_the_secret(
    console_for,
    organization,
    upstream,  # noqa: F811
):
    key = add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    elided = f"{PROVIDER_SECRET[:8]}****{PROVIDER_SECRET[-4:]}"
    upstream.behave(
        "status", status=401, message=f"Incorrect API key provided: {elided}. Or {PROVIDER_SECRET}."
    )

    text = press_test_this_key(console_for(organization, "admin"), key).content.decode()

    assert "failed" in text and "HTTP 401" in text
    assert "Incorrect API key provided: [provider key]. Or [provider key]." in text
    assert PROVIDER_SECRET not in text and elided not in text


def test_without_javascript_the_outcome_is_shown_on_the_keys_page(console_for, organization, upstream):  # noqa: F811
    key = add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    upstream.behave("status", status=503)
    response = press_test_this_key(console_for(organization, "admin"), key, htmx=False)
    text = response.content.decode()
    assert response.status_code == 200 and "<h1>" in text
    assert "HTTP 503" in text and "The server is overloaded or not ready yet." in text


def test_an_upstream_that_does_not_answer_is_said_plainly(console_for, organization):
    nobody = f"http://127.0.0.1:{free_port()}/v1"  # a port bound and closed again
    key = create_provider_key(organization, secret=PROVIDER_SECRET, base_url=nobody)
    text = press_test_this_key(console_for(organization, "admin"), key).content.decode()
    assert "No answer" in text and "ConnectError" in text


def test_an_address_the_gateway_may_not_call_is_not_called(console_for, organization, upstream, settings):  # noqa: F811
    key = add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False
    text = press_test_this_key(console_for(organization, "admin"), key).content.decode()
    assert "No answer" in text and "is private or local" in text
    assert upstream.requests == []


def test_only_an_admin_tests_a_key_and_only_their_organizations(
    console_for,
    organization,
    outsider,
    upstream,  # noqa: F811
):
    key = add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    member = console_for(organization, "member")
    assert "Test this key" not in member.get(key_page(key)).content.decode()
    assert press_test_this_key(member, key).status_code == 403
    theirs = console_for(outsider.organization, "owner")
    token = csrf_token(theirs, "/console/provider-keys/")
    assert theirs.post(f"{key_page(key)}test", {"csrfmiddlewaretoken": token}).status_code == 404
    assert upstream.requests == []
