"""Stored prompts through the proxy with the OpenAI SDK (docs/prompts.md): rendered before routing
with the version's defaults, the client's parameters winning, a label move served at once, the
errors, the audit entry and analytics, and the policies seeing the rendered text."""

import openai
import pytest
from channels.db import database_sync_to_async

from apps.policies.services import policy_create
from apps.prompts import services as prompts
from tests.proxy.conftest import add_alias_async, add_provider_key_async, entries

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "You answer questions about {{product}} in {{tone}} words."


def make_template(organization, user):
    template = prompts.template_create(organization=organization, data={"slug": "support", "name": "Support"})
    for number, greeting in ((1, "Question"), (2, "Customer question")):
        version = prompts.version_create(
            template=template,
            data={
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": greeting + ": {{question}}"},
                ],
                "variables": [
                    {"name": "product"},
                    {"name": "tone", "default": "plain"},
                    {"name": "question"},
                ],
                "defaults": {"model": "fast", "temperature": 0.2, "max_tokens": 50},
            },
        )
        assert version.number == number
    prompts.label_set(template=template, name="production", version=1, user=user)
    return template


@pytest.fixture
async def template(organization, upstream, owner):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return await database_sync_to_async(make_template)(organization, owner.user)


def prompt(version=None, **variables):
    variables = {"product": "the gateway", "question": "Is it fast?", **variables}
    return {"prompt": {"id": "support", "variables": variables, **({"version": version} if version else {})}}


async def test_a_template_is_rendered_and_routed_with_its_versions_defaults(sdk, template, upstream):
    answer = await sdk.chat.completions.create(
        model=openai.NOT_GIVEN, messages=[{"role": "user", "content": "And cheap?"}], extra_body=prompt()
    )

    sent = upstream.last_request.json
    assert sent["model"] == "gpt-4o-mini"  # the version's model, an alias of the organization
    assert sent["messages"] == [
        {"role": "system", "content": "You answer questions about the gateway in plain words."},
        {"role": "user", "content": "Question: Is it fast?"},
        {"role": "user", "content": "And cheap?"},
    ]
    assert (sent["temperature"], sent["max_tokens"]) == (0.2, 50)
    assert "prompt" not in sent
    assert answer.choices[0].message.content
    [entry] = await entries()
    assert (entry.prompt_template, entry.prompt_version, entry.prompt_label) == ("support", 1, "production")
    assert str(entry.prompt_template_id) == str(template.id)


async def test_the_clients_own_parameters_win(sdk, template, upstream):
    await sdk.chat.completions.create(
        model="fast", messages=[], temperature=0.9, max_completion_tokens=10, extra_body=prompt(tone="warm")
    )

    sent = upstream.last_request.json
    assert sent["temperature"] == 0.9
    assert sent["max_completion_tokens"] == 10 and "max_tokens" not in sent
    assert sent["messages"][0]["content"] == "You answer questions about the gateway in warm words."


async def test_a_label_move_is_served_from_the_next_request(sdk, template, upstream, owner):
    await sdk.chat.completions.create(model="fast", messages=[], extra_body=prompt())
    assert upstream.last_request.json["messages"][1]["content"] == "Question: Is it fast?"

    await database_sync_to_async(prompts.label_set)(
        template=template, name="production", version=2, user=owner.user
    )
    await sdk.chat.completions.create(model="fast", messages=[], extra_body=prompt())
    assert upstream.last_request.json["messages"][1]["content"] == "Customer question: Is it fast?"

    await sdk.chat.completions.create(model="fast", messages=[], extra_body=prompt(version=1))
    assert upstream.last_request.json["messages"][1]["content"] == "Question: Is it fast?"
    logged = await entries()
    assert [(e.prompt_version, e.prompt_label) for e in logged] == [
        (1, "production"),
        (2, "production"),
        (1, ""),
    ]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"prompt": {"id": "nope", "variables": {}}}, "prompt_not_found"),
        ({"prompt": {"id": "support", "version": "staging", "variables": {}}}, "prompt_not_found"),
        ({"prompt": {"id": "support", "variables": {"product": "x"}}}, "prompt_variable_missing"),
        (prompt(colour="red"), "prompt_variable_unknown"),
        ({"prompt": "support"}, "invalid_prompt"),
    ],
)
async def test_a_prompt_that_cannot_be_rendered_is_a_400_that_says_why(sdk, template, upstream, body, code):
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="fast", messages=[], extra_body=body)

    assert refused.value.code == code
    assert upstream.requests == []


async def test_another_organizations_template_is_not_found(proxy, template, outsider, upstream):
    from tests.factories import create_api_key
    from tests.proxy.conftest import bearer

    await add_provider_key_async(outsider.organization, upstream, secret="sk-upstream-two")
    await add_alias_async(outsider.organization, "fast", ("openai", "gpt-4o-mini"))
    _, theirs = await database_sync_to_async(create_api_key)(outsider.organization)

    response = await proxy.post(
        "/v1/chat/completions", json={"model": "fast", "messages": [], **prompt()}, headers=bearer(theirs)
    )

    assert (response.status_code, response.json()["error"]["code"]) == (400, "prompt_not_found")


async def test_policies_check_the_rendered_text(sdk, template, organization, upstream):
    await database_sync_to_async(policy_create)(
        organization=organization, data={"name": "no speed talk", "action": "block", "terms": ["is it fast"]}
    )

    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(model="fast", messages=[], extra_body=prompt())

    assert refused.value.code == "policy_blocked"
    assert upstream.requests == []


async def test_analytics_group_and_filter_by_prompt(sdk, template, session_client):
    await sdk.chat.completions.create(model="fast", messages=[], extra_body=prompt())
    await sdk.chat.completions.create(model="fast", messages=[{"role": "user", "content": "plain"}])
    await entries()
    get = database_sync_to_async(session_client.get)

    grouped = (await get("/api/v1/analytics/overview", {"group_by": "prompt"})).json()
    filtered = (await get("/api/v1/analytics/logs", {"prompt": "support"})).json()

    assert sorted((g["key"] or "", g["requests"]) for g in grouped["groups"]) == [("", 1), ("support", 1)]
    assert len(filtered["results"]) == 1
