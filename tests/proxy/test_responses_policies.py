"""Policies on POST /v1/responses (docs/policies.md): every text an input item carries is read,
redacted or blocked before the upstream; the answer is redacted whole and across streamed events."""

import pytest
from channels.db import database_sync_to_async

from apps.organizations.services import organization_update
from apps.policies.services import policy_create
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

create_policy = database_sync_to_async(policy_create)
EMAIL = "ada@example.com"


@pytest.fixture
async def bridged(organization, upstream):
    await add_provider_key_async(organization, upstream, provider="openai_compatible", secret="sk-compat")
    await add_alias_async(organization, "fast", ("openai_compatible", "qwen2.5-7b-instruct"))
    await database_sync_to_async(organization_update)(organization=organization, data={"log_bodies": "full"})
    return upstream


async def test_every_input_items_text_is_redacted_before_the_upstream_and_the_log(sdk, bridged, organization):
    await create_policy(
        organization=organization, data={"name": "no pii", "action": "redact", "detectors": ["email"]}
    )

    raw = await sdk.responses.with_raw_response.create(
        model="fast",
        instructions=f"Reply to {EMAIL}.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": f"Write to {EMAIL} today"}]},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "lookup",
                "arguments": f'{{"to": "{EMAIL}"}}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": f"found {EMAIL}"},
        ],
    )

    sent = bridged.last_request.json["messages"]
    assert EMAIL not in str(sent)
    assert sent[0] == {"role": "system", "content": "Reply to [REDACTED:email]."}
    assert sent[1]["content"] == [{"type": "text", "text": "Write to [REDACTED:email] today"}]
    assert sent[3]["content"] == "found [REDACTED:email]"
    assert raw.headers["x-gateway-policy-action"] == "redacted"
    [entry] = await entries()
    assert EMAIL not in entry.request_body
    assert entry.policy_decisions == [
        {"policy": "no pii", "action": "redacted", "category": "email", "count": 4}
    ]


async def test_a_blocked_term_in_a_tool_output_refuses_the_request(proxy, bridged, organization, gateway_key):
    await create_policy(
        organization=organization, data={"name": "secrets", "action": "block", "terms": ["hunter2"]}
    )

    response = await proxy.post(
        "/v1/responses",
        json={
            "model": "fast",
            "input": [
                {"type": "function_call", "call_id": "c", "name": "vault", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "the password is hunter2"},
            ],
        },
        headers=bearer(gateway_key[1]),
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "policy_blocked"
    assert bridged.requests == []


async def test_the_answer_is_redacted_whole_and_across_streamed_events(sdk, bridged, organization):
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

    whole = await sdk.responses.create(model="fast", input="hi")
    stream = await sdk.responses.create(model="fast", input="hi", stream=True)
    events = [event async for event in stream]

    assert whole.output_text == "Hello [REDACTED:pattern]: hi"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Hello [REDACTED:pattern]: hi"
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert done.text == deltas
    [part_done] = [e for e in events if e.type == "response.content_part.done"]
    assert part_done.part.text == deltas
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == deltas
    assert "from upstream" not in str([e.model_dump() for e in events])
    assert [e.sequence_number for e in events] == list(range(len(events)))
    logged = await entries()
    assert [entry.policy_action for entry in logged] == ["redacted", "redacted"]


async def test_an_image_sent_as_base64_is_not_read(proxy, bridged, organization, gateway_key):
    await create_policy(
        organization=organization,
        data={"name": "codes", "action": "block", "patterns": ["[A-Za-z0-9+/]{40}"]},
    )
    image = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4" * 1000
    body = {
        "model": "fast",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": image},
                ],
            }
        ],
    }

    response = await proxy.post("/v1/responses", json=body, headers=bearer(gateway_key[1]))

    assert response.status_code == 200, response.content
    assert bridged.last_request.json["messages"][0]["content"][1]["image_url"]["url"] == image
