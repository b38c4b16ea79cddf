"""Experiments through the proxy with the OpenAI SDK (docs/experiments.md): a running experiment
assigns each unit a variant, sticky, with its headers and audit columns; a prompt target serves the
variant's version; a paused one assigns nothing; a promotion changes what the target serves."""

from collections import Counter

import pytest
from channels.db import database_sync_to_async

from apps.experiments import services as experiments
from apps.prompts import services as prompts
from tests.proxy.conftest import add_alias_async, add_provider_key_async, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def split(organization, upstream):
    """``fast`` (gpt-4o-mini) against ``bright`` (gpt-4o), half and half, running."""
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "bright", ("openai", "gpt-4o"))

    def start():
        experiment = experiments.experiment_create(
            organization=organization,
            data={
                "name": "mini or not",
                "target": {"model": "fast"},
                "variants": [
                    {"name": "control", "weight": 1},
                    {"name": "bright", "weight": 1, "model": "bright"},
                ],
            },
        )
        return experiments.experiment_start(experiment=experiment)

    return await database_sync_to_async(start)()


async def test_each_unit_keeps_its_variant_and_the_answer_says_which(sdk, split, upstream):
    seen = {}
    for unit in [f"user-{n}" for n in range(20)] * 3:
        raw = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO, user=unit)
        variant = raw.headers["x-gateway-variant"]
        assert raw.headers["x-gateway-experiment"] == str(split.id)
        assert seen.setdefault(unit, variant) == variant  # the same unit, the same variant
        expected_model = "gpt-4o" if variant == "bright" else "gpt-4o-mini"
        assert upstream.last_request.json["model"] == expected_model

    assert set(seen.values()) == {"control", "bright"}
    logged = await entries()
    assert len(logged) == 60
    for entry in logged:
        assert entry.model == ("gpt-4o" if entry.experiment_variant == "bright" else "gpt-4o-mini")
    assert {str(e.experiment_id) for e in logged} == {str(split.id)}


async def test_without_a_user_the_header_then_the_key_is_the_unit(sdk, split):
    by_header = {
        (
            await sdk.chat.completions.with_raw_response.create(
                model="fast", messages=HELLO, extra_headers={"x-gateway-experiment-unit": "tenant-7"}
            )
        ).headers["x-gateway-variant"]
        for _ in range(5)
    }
    by_key = {
        (await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO)).headers[
            "x-gateway-variant"
        ]
        for _ in range(5)
    }

    assert len(by_header) == 1 and len(by_key) == 1


async def test_a_paused_experiment_assigns_nothing_and_a_promotion_changes_what_the_target_serves(
    sdk, split, upstream, owner
):
    await database_sync_to_async(experiments.experiment_pause)(experiment=split)
    paused = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO, user="u")
    assert "x-gateway-experiment" not in paused.headers
    assert upstream.last_request.json["model"] == "gpt-4o-mini"

    await database_sync_to_async(experiments.experiment_promote)(
        experiment=split, variant="bright", user=owner.user
    )
    await sdk.chat.completions.create(model="fast", messages=HELLO, user="u")
    assert upstream.last_request.json["model"] == "gpt-4o"


async def test_a_prompt_target_serves_each_variant_its_version(sdk, organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))

    def start():
        template = prompts.template_create(organization=organization, data={"slug": "greet", "name": "Greet"})
        for text in ("Hello {{name}}", "Good day {{name}}"):
            prompts.version_create(
                template=template,
                data={"messages": [{"role": "user", "content": text}], "variables": [{"name": "name"}]},
            )
        prompts.label_set(template=template, name="production", version=1)
        experiment = experiments.experiment_create(
            organization=organization,
            data={
                "name": "greetings",
                "target": {"prompt": "greet"},
                "variants": [
                    {"name": "v1", "weight": 1, "prompt_version": 1},
                    {"name": "v2", "weight": 1, "prompt_version": 2},
                ],
            },
        )
        return experiments.experiment_start(experiment=experiment)

    await database_sync_to_async(start)()
    sent = Counter()
    for unit in range(30):
        raw = await sdk.chat.completions.with_raw_response.create(
            model="fast",
            messages=[],
            user=f"u{unit}",
            extra_body={"prompt": {"id": "greet", "variables": {"name": "Ada"}}},
        )
        content = upstream.last_request.json["messages"][0]["content"]
        sent[(raw.headers["x-gateway-variant"], content)] += 1

    assert set(sent) == {("v1", "Hello Ada"), ("v2", "Good day Ada")}
    logged = await entries()
    assert {(e.experiment_variant, e.prompt_version) for e in logged} == {("v1", 1), ("v2", 2)}


async def test_one_unit_gets_one_variant_over_a_thousand_requests(sdk, split):
    variants = Counter()
    for _ in range(1000):
        raw = await sdk.chat.completions.with_raw_response.create(model="fast", messages=HELLO, user="steady")
        variants[raw.headers["x-gateway-variant"]] += 1

    assert len(variants) == 1 and sum(variants.values()) == 1000


async def test_an_experiment_applies_to_the_responses_and_messages_apis_in_their_own_names(
    proxy, organization, upstream, gateway_key
):
    from tests.proxy.conftest import bearer

    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_provider_key_async(organization, upstream, provider="anthropic", secret="sk-ant-upstream")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "claude", ("anthropic", "claude-sonnet-4-5"))

    def start(target: str):
        experiment = experiments.experiment_create(
            organization=organization,
            data={
                "name": f"short answers of {target}",
                "target": {"model": target},
                # Two variants of the same parameters (an experiment has two at least).
                "variants": [
                    {"name": "also short", "weight": 1, "parameters": {"max_tokens": 20, "temperature": 0.5}},
                    {"name": "short", "weight": 1, "parameters": {"max_tokens": 20, "temperature": 0.5}},
                ],
            },
        )
        return experiments.experiment_start(experiment=experiment)

    await database_sync_to_async(start)("fast")
    await database_sync_to_async(start)("claude")

    response = await proxy.post(
        "/v1/responses", json={"model": "fast", "input": "hi"}, headers=bearer(gateway_key[1])
    )
    assert response.status_code == 200, response.text
    sent = upstream.last_request.json
    assert (sent["max_output_tokens"], sent["temperature"]) == (20, 0.5) and "max_tokens" not in sent
    message = await proxy.post(
        "/v1/messages",
        json={"model": "claude", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": gateway_key[1]},
    )
    assert message.status_code == 200, message.text
    assert upstream.last_request.json["max_tokens"] == 20
    assert response.headers["x-gateway-variant"] in ("short", "also short")
