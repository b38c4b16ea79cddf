"""Policies through the proxy (docs/policies.md): what reaches the upstream, the headers, the audit
entry and the events, for a redaction, a block and a flag; the answer redacted, streamed too."""

import asyncio

import openai
import pytest
import regex
from channels.db import database_sync_to_async

from apps.events.models import Event
from apps.organizations.services import organization_update
from apps.policies.services import policy_create
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

create_policy = database_sync_to_async(policy_create)
EMAIL = "ada@example.com"


@pytest.fixture
async def routed(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "embed", ("openai", "text-embedding-3-small"))
    await database_sync_to_async(organization_update)(organization=organization, log_bodies="full")
    return upstream


async def events(organization) -> list[Event]:
    """The organization's policy events (its key's api_key.created is not this file's)."""
    await entries()  # the outbox flushed: events travel with the audit records
    mine = Event.objects.filter(organization=organization, type__startswith="policy.").order_by("created_at")
    return [event async for event in mine]


async def test_a_redacted_prompt_is_what_the_upstream_the_cache_and_the_audit_log_get(
    sdk, routed, organization
):
    await create_policy(organization=organization, name="no pii", action="redact", detectors=["email"])

    raw = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": f"Write to {EMAIL} today"}], temperature=0
    )

    assert routed.last_request.json["messages"][0]["content"] == "Write to [REDACTED:email] today"
    assert (raw.headers["x-gateway-policy-action"], raw.headers["x-gateway-policy-reason"]) == (
        "redacted",
        "no pii: email",
    )
    [entry] = await entries()
    assert EMAIL not in entry.request_body and "[REDACTED:email]" in entry.request_body
    assert entry.policy_action == "redacted"
    assert entry.policy_decisions == [
        {"policy": "no pii", "action": "redacted", "category": "email", "count": 1}
    ]
    [event] = await events(organization)
    assert event.type == "policy.redacted" and EMAIL not in str(event.data)
    # Cached redacted: the same prompt again is a hit on the redacted request.
    again = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": f"Write to {EMAIL} today"}], temperature=0
    )
    assert again.headers["x-gateway-cache"] == "l1" and len(routed.requests) == 1


async def test_an_embeddings_input_is_redacted_too(proxy, routed, organization, gateway_key):
    await create_policy(organization=organization, name="no pii", action="redact", detectors=["email"])

    response = await proxy.post(
        "/v1/embeddings",
        json={"model": "embed", "input": [f"mail {EMAIL}", "plain"]},
        headers=bearer(gateway_key[1]),
    )

    assert response.status_code == 200
    assert routed.last_request.json["input"] == ["mail [REDACTED:email]", "plain"]


async def test_a_block_answers_400_with_the_policy_headers_and_never_reaches_the_upstream(
    sdk, routed, organization
):
    await create_policy(
        organization=organization, name="no secrets", action="block", terms=["project falcon"]
    )

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model="fast",
            messages=[{"role": "user", "content": "Tell me about Project Falcon"}],
            temperature=0,
        )

    error = refused.value
    assert error.code == "policy_blocked" and "falcon" not in error.message.lower()
    assert error.response.headers["x-gateway-policy-action"] == "blocked"
    assert error.response.headers["x-gateway-policy-reason"] == "no secrets: term"
    assert error.response.headers["x-gateway-cache"] == "bypass"
    assert routed.requests == []
    [entry] = await entries()
    assert (entry.status, entry.error_code, entry.policy_action) == (400, "policy_blocked", "blocked")
    assert [event.type for event in await events(organization)] == ["policy.blocked"]


async def test_a_flag_lets_the_request_through_and_says_so(sdk, routed, organization):
    await create_policy(organization=organization, name="watch", action="flag", detectors=["ip_address"])

    raw = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": "ping 10.1.2.3"}]
    )

    assert raw.headers["x-gateway-policy-action"] == "flagged"
    assert routed.last_request.json["messages"][0]["content"] == "ping 10.1.2.3"


async def test_the_answer_is_redacted_whole_and_streamed_across_chunk_boundaries(sdk, routed, organization):
    # The stand-in answers "Hello from upstream: <prompt>" and streams it a word at a time.
    await create_policy(
        organization=organization,
        name="house style",
        action="redact",
        patterns=["from upstream"],
        apply_to_response=True,
    )
    messages = [{"role": "user", "content": "hi"}]

    whole = await sdk.chat.completions.create(model="fast", messages=messages)
    stream = await sdk.chat.completions.create(model="fast", messages=messages, stream=True)
    streamed = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    assert whole.choices[0].message.content == "Hello [REDACTED:pattern]: hi"
    assert streamed == "Hello [REDACTED:pattern]: hi"
    logged = await entries()
    assert [entry.policy_action for entry in logged] == ["redacted", "redacted"]


async def test_a_scan_that_runs_out_of_time_fails_closed(sdk, routed, organization, settings):
    # A catastrophic pattern such as (a+)+$ is refused when it is saved (tests/policies); what still
    # runs out of the scan's time on some text is blocked: here every scan does, the bound being ~0.
    settings.GATEWAY_POLICY_TIMEOUT_SECONDS = 1e-9
    await create_policy(organization=organization, name="slow", action="redact", patterns=["a+"])

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "a" * 5000 + "b"}]
        )

    assert refused.value.response.headers["x-gateway-policy-reason"] == "slow: timeout"
    assert routed.requests == []


async def test_another_organizations_policies_never_apply(sdk, routed, outsider):
    await create_policy(organization=outsider.organization, name="theirs", action="block", terms=["hello"])

    answer = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": "hello"}]
    )

    assert answer.status_code == 200 and "x-gateway-policy-action" not in answer.headers


@pytest.fixture
def compiles(monkeypatch):
    """Every pattern the ``regex`` package compiles during the test, and whether it was compiled on
    a running event loop (a request's thread) or elsewhere (the thread that loads a configuration).
    A spy around the real function: it changes nothing of what is compiled."""
    seen: list[tuple[str, bool]] = []
    real = regex.compile

    def spy(pattern, *args, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        seen.append((pattern, on_loop))
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(regex, "compile", spy)
    return seen


async def test_no_request_compiles_a_pattern_the_configuration_load_compiles_them(
    sdk, routed, organization, compiles
):
    await create_policy(organization=organization, name="codes", action="redact", patterns=[r"ACME-\d{4}"])
    compiles.clear()  # the save compiled nothing here (its check runs in a child process)

    answer = await sdk.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "order ACME-1234"}]
    )

    assert routed.last_request.json["messages"][0]["content"] == "order [REDACTED:pattern]"
    assert answer.choices[0].message.content
    assert [source for source, on_loop in compiles if on_loop] == []
    assert r"(?:ACME-\d{4})" in [source for source, _ in compiles]


async def test_a_pattern_stored_unchecked_is_never_compiled_and_blocks_only_its_own_requests(
    sdk, routed, organization, outsider, compiles, gateway_key, proxy
):
    """Issue 19, finding 1: ``(?:a{1000}){3000}`` stored before the save-time check (or around the
    services) took 2 s to compile on the event loop and held up every organization's requests. It is
    never compiled now: its policy blocks the requests it applies to, and the rest go on."""
    from apps.policies.models import Policy
    from tests.factories import create_api_key

    await Policy.objects.acreate(
        organization=organization, name="legacy", action="flag", patterns=["(?:a{1000}){3000}"]
    )
    _, outsider_secret = await database_sync_to_async(create_api_key)(outsider.organization)

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])
    theirs = await proxy.get("/v1/models", headers=bearer(outsider_secret))
    mine = await proxy.get("/v1/models", headers=bearer(gateway_key[1]))

    assert refused.value.response.headers["x-gateway-policy-reason"] == "legacy: unchecked_pattern"
    assert routed.requests == []
    assert (theirs.status_code, mine.status_code) == (200, 200)
    assert not any("a{1000}" in source for source, _ in compiles)
