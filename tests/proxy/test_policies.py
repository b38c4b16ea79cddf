"""Policies through the proxy (docs/policies.md): what reaches the upstream, the headers, the audit
entry and the events, for a redaction, a block and a flag; the answer redacted, streamed too."""

import asyncio
import base64
import json
import threading

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
    await database_sync_to_async(organization_update)(organization=organization, data={"log_bodies": "full"})
    return upstream


async def events(organization) -> list[Event]:
    """The organization's policy events (its key's api_key.created is not this file's)."""
    await entries()  # the outbox flushed: events travel with the audit records
    mine = Event.objects.filter(organization=organization, type__startswith="policy.").order_by("created_at")
    return [event async for event in mine]


async def test_a_redacted_prompt_is_what_the_upstream_the_cache_and_the_audit_log_get(
    sdk, routed, organization
):
    await create_policy(
        organization=organization, data={"name": "no pii", "action": "redact", "detectors": ["email"]}
    )

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
    await create_policy(
        organization=organization, data={"name": "no pii", "action": "redact", "detectors": ["email"]}
    )

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
        organization=organization, data={"name": "no secrets", "action": "block", "terms": ["project falcon"]}
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
    await create_policy(
        organization=organization, data={"name": "watch", "action": "flag", "detectors": ["ip_address"]}
    )

    raw = await sdk.chat.completions.with_raw_response.create(
        model="fast", messages=[{"role": "user", "content": "ping 10.1.2.3"}]
    )

    assert raw.headers["x-gateway-policy-action"] == "flagged"
    assert routed.last_request.json["messages"][0]["content"] == "ping 10.1.2.3"


async def test_the_answer_is_redacted_whole_and_streamed_across_chunk_boundaries(sdk, routed, organization):
    # The stand-in answers "Hello from upstream: <prompt>" and streams it a word at a time.
    await create_policy(
        organization=organization,
        data={
            "name": "house style",
            "action": "redact",
            "patterns": ["from upstream"],
            "apply_to_response": True,
        },
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
    await create_policy(
        organization=organization, data={"name": "slow", "action": "redact", "patterns": ["a+"]}
    )

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "a" * 5000 + "b"}]
        )

    assert refused.value.response.headers["x-gateway-policy-reason"] == "slow: timeout"
    assert routed.requests == []


async def test_another_organizations_policies_never_apply(sdk, routed, outsider):
    await create_policy(
        organization=outsider.organization, data={"name": "theirs", "action": "block", "terms": ["hello"]}
    )

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
    await create_policy(
        organization=organization, data={"name": "codes", "action": "redact", "patterns": [r"ACME-\d{4}"]}
    )
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


# --- Issue 19, finding 6: every spelling of a deployment, every string that reaches the upstream ---


@pytest.mark.parametrize(
    ("scope", "requested"),
    [
        ("fast", "openai/gpt-4o-mini"),  # a block scoped to the alias let the same deployment through
        ("openai/gpt-4o-mini", "fast"),
        ("fast", "openai/GPT-4o-mini "),
        ("fast", "fast"),
    ],
)
async def test_a_model_scope_catches_every_spelling_of_the_same_deployment(
    sdk, routed, organization, scope, requested
):
    await create_policy(
        organization=organization,
        data={"name": "titan", "action": "block", "terms": ["titan"], "scope": {"models": [scope]}},
    )

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model=requested, messages=[{"role": "user", "content": "about titan"}]
        )

    assert refused.value.response.headers["x-gateway-policy-reason"] == "titan: term"
    assert routed.requests == []


async def test_a_scope_and_a_denied_model_follow_an_alias_to_its_fallbacks_and_no_further(
    sdk, routed, organization
):
    await add_alias_async(organization, "cheap", ("openai", "gpt-4.1-nano"), fallbacks=["fast"])
    await add_alias_async(organization, "other", ("openai", "gpt-4.1"))
    await create_policy(
        organization=organization, data={"name": "no mini", "action": "block", "denied_models": ["fast"]}
    )
    messages = [{"role": "user", "content": "hi"}]

    with pytest.raises(openai.BadRequestError) as direct:
        await sdk.chat.completions.create(model="openai/gpt-4o-mini", messages=messages)
    with pytest.raises(openai.BadRequestError) as by_fallback:
        await sdk.chat.completions.create(model="cheap", messages=messages)
    other = await sdk.chat.completions.create(model="other", messages=messages)

    assert direct.value.response.headers["x-gateway-policy-reason"] == "no mini: denied_model"
    assert by_fallback.value.response.headers["x-gateway-policy-reason"] == "no mini: denied_model"
    assert other.choices[0].message.content and len(routed.requests) == 1


SSN, MAIL = "123-45-6789", "ada@example.com"


def _tool(description: str = "Look a customer up", *, enum=("gold", "silver"), prop="tier") -> dict:
    return {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {prop: {"type": "string", "enum": list(enum), "description": "the tier"}},
            },
        },
    }


def _body(**changes) -> dict:
    return {"model": "fast", "messages": [{"role": "user", "content": "hello"}], **changes}


@pytest.mark.parametrize(
    "body",
    [
        _body(tools=[_tool(f"Customer {SSN}")]),  # found in review: it reached the upstream
        _body(messages=[{"role": "user", "name": MAIL, "content": "hello"}]),  # found in review too
        _body(tools=[_tool(enum=("gold", MAIL))]),
        _body(
            messages=[
                {"role": "user", "content": "hello"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"ssn": "{SSN}"}}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": f"found {MAIL}"},
            ]
        ),
        _body(messages=[{"role": "assistant", "content": [{"type": "refusal", "refusal": f"not {SSN}"}]}]),
        _body(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "out", "schema": {"type": "object", "description": f"for {MAIL}"}},
            }
        ),
        _body(user=MAIL),
        _body(metadata={"customer": MAIL}),
        _body(stop=[SSN]),
        _body(unknown_field={"deep": [{"deeper": f"x {SSN}"}]}),
        _body(tools=[_tool(prop=MAIL)]),  # an object's key
    ],
)
async def test_a_block_reads_every_string_that_would_reach_the_upstream(
    proxy, routed, organization, gateway_key, body
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "block", "detectors": ["us_ssn", "email"]}
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 400 and response.json()["error"]["code"] == "policy_blocked"
    assert routed.requests == []


async def test_a_redaction_redacts_names_tools_schemas_and_parameters_too(sdk, routed, organization):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "redact", "detectors": ["us_ssn", "email"]}
    )

    await sdk.chat.completions.create(
        model="fast",
        messages=[{"role": "user", "name": MAIL, "content": [{"type": "text", "text": f"mail {MAIL}"}]}],
        tools=[_tool(f"Customer {SSN}", enum=("gold", MAIL))],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": {"type": "object", "description": f"for {MAIL}"}},
        },
        user=MAIL,
    )

    sent = routed.last_request.json
    assert MAIL not in json.dumps(sent) and SSN not in json.dumps(sent)
    assert sent["messages"][0]["name"] == "[REDACTED:email]"
    assert sent["messages"][0]["content"][0]["text"] == "mail [REDACTED:email]"
    assert sent["tools"][0]["function"]["description"] == "Customer [REDACTED:us_ssn]"
    assert sent["tools"][0]["function"]["parameters"]["properties"]["tier"]["enum"] == [
        "gold",
        "[REDACTED:email]",
    ]
    assert sent["response_format"]["json_schema"]["schema"]["description"] == "for [REDACTED:email]"
    assert sent["user"] == "[REDACTED:email]"


async def test_a_redact_policy_that_finds_something_in_a_key_blocks_it_rather_than_rename_it(
    proxy, routed, organization, gateway_key
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "redact", "detectors": ["email"]}
    )

    response = await proxy.post(
        "/v1/chat/completions", json=_body(tools=[_tool(prop=MAIL)]), headers=bearer(gateway_key[1])
    )

    assert response.status_code == 400 and response.headers["x-gateway-policy-reason"] == "pii: email"
    assert routed.requests == []


async def test_images_and_audio_sent_as_base64_are_not_read_and_do_not_use_up_the_scan(
    proxy, routed, organization, gateway_key, settings
):
    await create_policy(
        organization=organization,
        data={"name": "codes", "action": "block", "patterns": ["[A-Za-z0-9+/]{40}"]},
    )
    image = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4" * 1000
    body = _body(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": image}},
                    {"type": "input_audio", "input_audio": {"data": image[22:], "format": "wav"}},
                ],
            }
        ]
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 200, response.content
    assert routed.last_request.json["messages"][0]["content"][1]["image_url"]["url"] == image


async def test_an_embeddings_request_is_read_whole_too(proxy, routed, organization, gateway_key):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "redact", "detectors": ["email"]}
    )

    response = await proxy.post(
        "/v1/embeddings",
        json={"model": "embed", "input": "plain", "user": MAIL},
        headers=bearer(gateway_key[1]),
    )

    assert response.status_code == 200
    assert routed.last_request.json["user"] == "[REDACTED:email]"


# --- Issue 19, second outside check: what still escaped the first fixes ---------------------------


@pytest.mark.parametrize(
    ("policy", "requested"),
    [
        ({"denied_models": ["openai/o3"]}, "openai/o3-2025-04-16"),  # found by the outside check
        ({"denied_models": ["openai/o3"]}, "openai/o3-latest"),
        ({"denied_models": ["openai/o3-2025-04-16"]}, "openai/o3"),  # the bare name may serve it
        ({"terms": ["titan"], "scope": {"models": ["fast"]}}, "openai/gpt-4o-mini-2024-08-06"),  # found too
        ({"terms": ["titan"], "scope": {"models": ["openai/gpt-4o-mini"]}}, "openai/GPT-4o-mini-2024-07-18"),
    ],
)
async def test_a_scope_and_a_denied_model_catch_the_dated_snapshots_of_the_model_they_name(
    sdk, routed, organization, policy, requested
):
    await create_policy(organization=organization, data={"name": "titan", "action": "block", **policy})

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model=requested, messages=[{"role": "user", "content": "about titan"}]
        )

    assert refused.value.code == "policy_blocked"
    assert routed.requests == []


@pytest.mark.parametrize(
    "requested", ["openai/o3-mini", "openai/o3-pro-2025-06-10", "openai/gpt-4o-2024-05-13"]
)
async def test_another_model_or_another_snapshot_is_not_the_model_a_policy_names(
    sdk, routed, organization, requested
):
    await create_policy(
        organization=organization,
        data={"name": "no o3", "action": "block", "denied_models": ["openai/o3", "openai/gpt-4o-2024-08-06"]},
    )

    answer = await sdk.chat.completions.create(model=requested, messages=[{"role": "user", "content": "hi"}])

    assert answer.choices[0].message.content and len(routed.requests) == 1


def _parts(*parts) -> dict:
    return _body(messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, *parts]}])


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"


@pytest.mark.parametrize(
    "body",
    [
        # Found by the outside check: a data: prefix made any string unread.
        _body(messages=[{"role": "user", "content": f"data:x;base64,\nmy ssn is {SSN}"}]),
        _parts({"type": "text", "text": f"data:x;base64,\nmy ssn is {SSN}"}),
        _parts({"type": "file", "file": {"filename": "a.txt", "file_data": f"my ssn is {SSN}"}}),
        # In a field that carries media, only a base64 payload is left unread.
        _parts({"type": "file", "file": {"file_data": f"data:text/plain;base64,my ssn is {SSN}"}}),
        _parts({"type": "input_audio", "input_audio": {"data": f"{PNG} {SSN}", "format": "wav"}}),
        _parts({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}\n{SSN}"}}),
        _parts({"type": "image_url", "image_url": {"url": f"data:image/png;x={SSN};base64,{PNG}"}}),
        _parts({"type": "image_url", "image_url": {"url": f"https://example.com/{SSN}.png"}}),
        _body(tools=[_tool(f"data:text/plain;base64,{SSN}")]),
    ],
)
async def test_a_data_url_is_read_unless_it_is_a_base64_payload_in_a_field_that_carries_media(
    proxy, routed, organization, gateway_key, body
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "block", "detectors": ["us_ssn"]}
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 400 and response.json()["error"]["code"] == "policy_blocked"
    assert routed.requests == []


async def test_a_redact_policy_that_finds_something_in_a_media_header_blocks_it(
    proxy, routed, organization, gateway_key
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "redact", "detectors": ["us_ssn"]}
    )
    url = f"data:image/png;x={SSN};base64,{PNG}"

    response = await proxy.post(
        "/v1/chat/completions",
        json=_parts({"type": "image_url", "image_url": {"url": url}}),
        headers=bearer(gateway_key[1]),
    )

    assert response.status_code == 400 and response.headers["x-gateway-policy-reason"] == "pii: us_ssn"
    assert routed.requests == []


async def test_a_base64_payload_wrapped_in_lines_in_a_media_field_passes_unread(
    proxy, routed, organization, gateway_key
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "block", "detectors": ["us_ssn"]}
    )
    wrapped = "\r\n".join([PNG] * 40) + "==\n"
    body = _parts(
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{wrapped}"}},
        {"type": "input_audio", "input_audio": {"data": wrapped, "format": "wav"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{wrapped}"}},
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 200, response.content
    assert routed.last_request.json["messages"][0]["content"][1:] == body["messages"][0]["content"][1:]


@pytest.mark.parametrize("tokens", [[1734, 374, 264], [[1734, 374], [264]]])
async def test_embeddings_as_token_ids_are_refused_when_a_policy_reads_text(
    proxy, routed, organization, gateway_key, outsider, tokens
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "redact", "detectors": ["email"]}
    )

    response = await proxy.post(
        "/v1/embeddings", json={"model": "embed", "input": tokens}, headers=bearer(gateway_key[1])
    )

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "policy_unreadable_input",
        "input",
        "invalid_request_error",
    )
    assert routed.requests == []


async def test_embeddings_as_token_ids_pass_where_no_policy_reads_text(
    proxy, routed, organization, gateway_key, outsider
):
    await create_policy(
        organization=organization, data={"name": "models", "action": "block", "denied_models": ["openai/o3"]}
    )
    await create_policy(
        organization=outsider.organization, data={"name": "pii", "action": "block", "detectors": ["email"]}
    )

    response = await proxy.post(
        "/v1/embeddings", json={"model": "embed", "input": [[1734, 374]]}, headers=bearer(gateway_key[1])
    )

    assert response.status_code == 200, response.content
    assert routed.last_request.json["input"] == [[1734, 374]]


async def test_an_organizations_policy_build_never_holds_up_another_organizations_database_calls(
    proxy, routed, organization, outsider, gateway_key, monkeypatch
):
    """The outside check: forty term lists compiling for 16 s in the thread every database call
    shares held up another organization's new key for 15.96 s. Here the build of this organization's
    pattern is held until the other organization has been answered: a new key of it (a key read, a
    configuration read, both database calls) must not wait for the build."""
    from tests.factories import create_api_key

    await create_policy(
        organization=organization, data={"name": "codes", "action": "flag", "patterns": [r"ACME-\d{4}"]}
    )
    _, outsider_secret = await database_sync_to_async(create_api_key)(outsider.organization)
    building, release = threading.Event(), threading.Event()
    real = regex.compile

    def held(pattern, *args, **kwargs):
        if pattern == r"(?:ACME-\d{4})":
            building.set()
            release.wait(timeout=30)
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(regex, "compile", held)
    chat = {"model": "fast", "messages": [{"role": "user", "content": "ACME-1234"}]}
    mine = asyncio.create_task(proxy.post("/v1/chat/completions", json=chat, headers=bearer(gateway_key[1])))
    try:
        assert await asyncio.to_thread(building.wait, 10)
        theirs = await asyncio.wait_for(proxy.get("/v1/models", headers=bearer(outsider_secret)), 10)
        assert not mine.done()  # this organization's request waits for its own build
    finally:
        release.set()

    assert theirs.status_code == 200
    answer = await mine
    assert answer.status_code == 200 and answer.headers["x-gateway-policy-action"] == "flagged"


async def test_terms_stored_unchecked_are_never_compiled_and_block_their_policys_requests(
    sdk, routed, organization, compiles
):
    from apps.policies.models import Policy

    await Policy.objects.acreate(organization=organization, name="legacy", action="flag", terms=["falcon"])

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])

    assert refused.value.response.headers["x-gateway-policy-reason"] == "legacy: unchecked_pattern"
    assert routed.requests == [] and not any("falcon" in source for source, _ in compiles)


async def test_policies_past_the_organizations_bound_are_not_compiled_and_block_their_requests(
    sdk, routed, organization
):
    """Written around the services (which refuse the 51st active policy): the first fifty apply,
    the rest block the requests they apply to rather than add to what the load compiles."""
    from apps.policies.models import Policy
    from apps.policies.patterns import ACTIVE_POLICIES_LIMIT

    await Policy.objects.abulk_create(
        Policy(organization=organization, name=f"p{i}", action="flag", detectors=["email"], order=i)
        for i in range(ACTIVE_POLICIES_LIMIT + 1)
    )

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])

    assert refused.value.response.headers["x-gateway-policy-reason"] == (
        f"p{ACTIVE_POLICIES_LIMIT}: organization_limit"
    )
    assert routed.requests == []


# --- Issue 19, third round: base64 is left unread only where media is, and data URLs are decoded ---


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


CARD = "4111111111111111"
TEXT_PART = {"type": "text", "text": "look"}


@pytest.mark.parametrize(
    "body",
    [
        # Found by the outside check: any object under a key named input_audio or file was media.
        _body(
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "lookup",
                        "parameters": {
                            "type": "object",
                            "properties": {"input_audio": {"type": "string", "data": "Titan"}},
                        },
                    },
                }
            ]
        ),
        _body(messages=[{"role": "user", "content": "hello", "input_audio": {"data": "Titan"}}]),
        _body(metadata={"file": {"file_data": CARD}}),
        _parts({"type": "text", "text": "look", "file": {"file_data": "TITAN"}}),
        # A part whose type is not the media its field names.
        _parts({"type": "text", "text": "look", "input_audio": {"data": "Titan"}}),
        _parts(
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/a.png"},
                "file": {"file_data": CARD},
            }
        ),
        # Where media is: a short "payload" is a word, read as written ...
        _parts({"type": "input_audio", "input_audio": {"data": "Titan", "format": "wav"}}),
        _parts({"type": "input_audio", "input_audio": {"data": "TITA", "format": "wav"}}),
        _parts({"type": "file", "file": {"file_data": CARD}}),
        # ... and a payload that decodes to text is read decoded, however long.
        _parts({"type": "file", "file": {"file_data": _b64("our titan plan " + "x" * 2000)}}),
        _parts({"type": "file", "file": {"file_data": "data:text/plain;base64," + _b64("about Titan")}}),
        _parts({"type": "image_url", "image_url": {"url": "data:image/png;base64," + _b64("card " + CARD)}}),
    ],
)
async def test_base64_is_left_unread_only_at_the_places_a_chat_request_carries_media(
    proxy, routed, organization, gateway_key, body
):
    await create_policy(
        organization=organization,
        data={"name": "titan", "action": "block", "terms": ["titan", "tita"], "detectors": ["payment_card"]},
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 400 and response.json()["error"]["code"] == "policy_blocked"
    assert routed.requests == []


async def test_binary_media_at_its_places_still_passes_unread(proxy, routed, organization, gateway_key):
    import base64

    await create_policy(
        organization=organization,
        data={"name": "titan", "action": "block", "terms": ["titan"], "detectors": ["payment_card"]},
    )
    # A PNG's signature and bytes that spell nothing: binary, not text.
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
    body = _parts(
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        {"type": "input_audio", "input_audio": {"data": png, "format": "wav"}},
        {"type": "file", "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{png}"}},
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 200, response.content
    assert routed.last_request.json["messages"][0]["content"][1:] == body["messages"][0]["content"][1:]


@pytest.mark.parametrize("action", ["block", "redact"])
@pytest.mark.parametrize(
    "url",
    [
        "data:text/plain,ssn%20is%20123-45-6789",  # found by the outside check
        "data:text/plain,ssn%20is%20%31%32%33-%34%35-%36%37%38%39",
        "DATA:text/plain;charset=utf-8,%31%32%33%2D%34%35%2D%36%37%38%39",
    ],
)
async def test_a_percent_encoded_data_url_is_read_decoded_and_a_match_blocks(
    proxy, routed, organization, gateway_key, action, url
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": action, "detectors": ["us_ssn"]}
    )

    response = await proxy.post(
        "/v1/chat/completions",
        json=_parts({"type": "image_url", "image_url": {"url": url}}),
        headers=bearer(gateway_key[1]),
    )

    assert response.status_code == 400 and response.headers["x-gateway-policy-reason"] == "pii: us_ssn"
    assert routed.requests == []


def _spaced(text: str, every: int, gap: str) -> str:
    return gap.join(text[i : i + every] for i in range(0, len(text), every))


SSN_TEXT = f"report line: ssn {SSN} belongs to the codename in the file. " * 12


@pytest.mark.parametrize(
    "body",
    [
        # Found by the third outside check: base64 a lenient reader takes was never decoded ...
        _parts(
            {
                "type": "file",
                "file": {
                    "filename": "a.pdf",
                    "file_data": "data:application/pdf;base64," + _spaced(_b64(SSN_TEXT), 76, "\t\n"),
                },
            }
        ),
        _body(
            messages=[
                {
                    "role": "user",
                    "content": "data:text/plain;base64," + _spaced(_b64(f"my ssn is {SSN}"), 4, " "),
                }
            ]
        ),
        _body(
            messages=[
                {"role": "user", "content": "data:text/plain;base64," + _b64(f"ssn {SSN}!").rstrip("=")}
            ]
        ),
        _body(
            messages=[
                {
                    "role": "user",
                    "content": "data:text/plain;base64,"
                    + _b64(f"ssn? {SSN}").replace("+", "-").replace("/", "_"),
                }
            ]
        ),
        _body(
            messages=[
                {
                    "role": "user",
                    "content": "data:text/plain;base64," + _b64(f"ssn {SSN}.").replace("=", "%3D"),
                }
            ]
        ),
        # ... a header of any length was not read as one ...
        _body(
            messages=[
                {
                    "role": "user",
                    "content": "data:text/plain;x=" + "a" * 300 + ",%31%32%33-%34%35-%36%37%38%39",
                }
            ]
        ),
        _body(messages=[{"role": "user", "content": " data:text/plain,%31%32%33-%34%35-%36%37%38%39"}]),
        # ... and the charset was not taken.
        _body(
            messages=[
                {
                    "role": "user",
                    "content": "data:text/plain;charset=utf-16le," + "".join(f"{c}%00" for c in SSN),
                }
            ]
        ),
        _parts(
            {
                "type": "file",
                "file": {
                    "filename": "a.txt",
                    "file_data": "data:text/plain;charset=utf-16le;base64,"
                    + base64.b64encode(SSN_TEXT.encode("utf-16le")).decode(),
                },
            }
        ),
    ],
    ids=[
        "tab-wrapped",
        "spaced",
        "unpadded",
        "url-safe",
        "escaped-padding",
        "long-header",
        "leading-space",
        "utf-16",
        "utf-16-base64",
    ],
)
async def test_a_data_url_is_read_as_a_lenient_reader_decodes_it(
    proxy, routed, organization, gateway_key, body
):
    await create_policy(
        organization=organization, data={"name": "pii", "action": "block", "detectors": ["us_ssn"]}
    )

    response = await proxy.post("/v1/chat/completions", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 400, response.content
    assert response.headers["x-gateway-policy-reason"] == "pii: us_ssn"
    assert routed.requests == []


async def test_a_configuration_read_again_for_another_change_compiles_no_policy(
    proxy, routed, organization, gateway_key, monkeypatch
):
    """Every write bumps the organization's one generation, and each worker reads its configuration
    again: the policies are compiled again only when they (or the models) changed (found in review:
    every key or team change cost each worker up to 250 ms of compiling)."""
    from apps.policies.engine import PolicyEngine
    from apps.policies.engine_cache import proxy_engines
    from apps.teams.services import team_create

    proxy_engines.clear()
    compiled = []
    build = PolicyEngine.__dict__["build"].__func__

    def counted(cls, snapshots, **kwargs):
        compiled.append([snapshot.name for snapshot in snapshots])
        return build(cls, snapshots, **kwargs)

    monkeypatch.setattr(PolicyEngine, "build", classmethod(counted))
    await create_policy(
        organization=organization, data={"name": "pii", "action": "block", "detectors": ["us_ssn"]}
    )
    headers = bearer(gateway_key[1])
    assert (await proxy.post("/v1/chat/completions", json=_body(), headers=headers)).status_code == 200

    await database_sync_to_async(team_create)(
        organization=organization, data={"name": "Later", "slug": "later"}
    )
    assert (await proxy.post("/v1/chat/completions", json=_body(), headers=headers)).status_code == 200
    assert compiled == [["pii"]]  # the team's change was read, the policies were not compiled again

    await create_policy(
        organization=organization, data={"name": "mail", "action": "block", "detectors": ["email"]}
    )
    assert (await proxy.post("/v1/chat/completions", json=_body(), headers=headers)).status_code == 200
    assert compiled == [["pii"], ["pii", "mail"]]
