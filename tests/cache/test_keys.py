"""The fingerprint, the temperature rule and the key: what makes two requests one cache entry."""

import pytest

from apps.cache.keys import entry_key, is_cacheable, request_fingerprint, semantic_query
from apps.cache.settings import CacheSettings, effective_settings
from apps.organizations.selectors import OrganizationSnapshot
from apps.teams.selectors import TeamSnapshot

CHAT = "chat.completions"
BODY = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "temperature": 0,
}


def settings(**changes) -> CacheSettings:
    values = {
        "enabled": True,
        "ttl_seconds": 3600,
        "any_temperature": False,
        "semantic_enabled": False,
        "semantic_threshold": 0.95,
        "embedding_model": "",
    }
    return CacheSettings(**{**values, **changes})


@pytest.mark.parametrize(
    "ignored",
    [
        {"user": "someone"},
        {"stream": True},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"metadata": {"run": "7"}},
        {"store": True},
        {"service_tier": "auto"},
        {"model": "another-alias"},
        {"safety_identifier": "abc"},
    ],
)
def test_what_does_not_change_the_answer_does_not_change_the_fingerprint(ignored):
    assert request_fingerprint(CHAT, {**BODY, **ignored}) == request_fingerprint(CHAT, BODY)


@pytest.mark.parametrize(
    "changed",
    [
        {"temperature": 0.2},
        {"messages": [{"role": "user", "content": "What is the capital of Spain?"}]},
        {"messages": [{"role": "system", "content": "Be brief."}, *BODY["messages"]]},
        {"top_p": 0.5},
        {"max_tokens": 10},
        {"max_completion_tokens": 10},
        {"n": 2},
        {"seed": 1},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
        {"stop": ["\n"]},
        {"logit_bias": {"50256": -100}},
        {"logprobs": True},
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"a_parameter_of_next_year": 1},
    ],
)
def test_what_changes_the_answer_changes_the_fingerprint(changed):
    assert request_fingerprint(CHAT, {**BODY, **changed}) != request_fingerprint(CHAT, BODY)


def test_the_order_of_fields_and_0_against_0_point_0_do_not_matter():
    reordered = dict(reversed(list({**BODY, "temperature": 0.0}.items())))

    assert request_fingerprint(CHAT, reordered) == request_fingerprint(CHAT, BODY)


def test_the_same_body_on_another_endpoint_is_another_fingerprint():
    body = {"input": "hello"}

    assert request_fingerprint("embeddings", body) != request_fingerprint(CHAT, body)
    with pytest.raises(ValueError):
        request_fingerprint("images.generations", body)


@pytest.mark.parametrize(
    ("body", "cacheable"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0}, True),
        ({"temperature": 0, "n": 3}, True),
        ({}, False),  # absent means 1 at the providers
        ({"temperature": 0.7}, False),
        ({"temperature": None}, False),
        ({"temperature": False}, False),
        ({"temperature": "0"}, False),
    ],
)
def test_by_default_only_an_explicit_temperature_of_0_is_cached(body, cacheable):
    assert is_cacheable(CHAT, {**BODY, **body} if body else {"messages": BODY["messages"]}, settings()) is (
        cacheable
    )


def test_an_organization_may_widen_caching_to_any_temperature():
    assert is_cacheable(
        CHAT, {"messages": BODY["messages"], "temperature": 1.2}, settings(any_temperature=True)
    )
    assert is_cacheable(CHAT, {"messages": BODY["messages"]}, settings(any_temperature=True))


def test_embeddings_are_cacheable_and_nothing_is_when_the_cache_is_off():
    assert is_cacheable("embeddings", {"input": "hi"}, settings())
    assert not is_cacheable("embeddings", {"input": "hi"}, settings(enabled=False))
    assert not is_cacheable(CHAT, BODY, settings(enabled=False))
    assert not is_cacheable("images.generations", {"temperature": 0}, settings())


def test_the_key_keeps_organizations_epochs_regions_and_models_apart():
    fingerprint = request_fingerprint(CHAT, BODY)
    eu = frozenset({"eu"})
    key = entry_key("org-a", 0, eu, "openai/gpt-4o-mini", fingerprint)

    assert key != entry_key("org-b", 0, eu, "openai/gpt-4o-mini", fingerprint)
    assert key != entry_key("org-a", 1, eu, "openai/gpt-4o-mini", fingerprint)
    assert key != entry_key("org-a", 0, eu, "openai/gpt-4o", fingerprint)
    assert key != entry_key("org-a", 0, None, "openai/gpt-4o-mini", fingerprint)  # unrestricted
    assert key != entry_key("org-a", 0, frozenset({"us"}), "openai/gpt-4o-mini", fingerprint)
    assert key != entry_key("org-a", 0, frozenset({"eu", "us"}), "openai/gpt-4o-mini", fingerprint)
    assert key != entry_key("org-a", 0, frozenset(), "openai/gpt-4o-mini", fingerprint)  # none allowed
    assert key == entry_key("org-a", 0, frozenset({"eu"}), "openai/gpt-4o-mini", fingerprint)


def test_a_region_label_cannot_make_two_keys_read_the_same():
    fingerprint = request_fingerprint(CHAT, BODY)
    # Labels come from the request's header too: a ':' or ',' in one must not shift the key's parts.
    assert entry_key("org", 0, frozenset({"eu:m"}), "x", fingerprint) != entry_key(
        "org", 0, frozenset({"eu"}), "m:x", fingerprint
    )
    assert entry_key("org", 0, frozenset({"eu,us"}), "m", fingerprint) != entry_key(
        "org", 0, frozenset({"eu", "us"}), "m", fingerprint
    )


# --- L3: what is embedded, and the partition everything else must match -----------------------------

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo"}}


@pytest.mark.parametrize(
    "part",
    [
        IMAGE,
        {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-abc"}},
        {"type": "a_part_of_next_year"},
        "not a part",
    ],
)
def test_l3_is_not_used_for_a_prompt_with_anything_but_text(part):
    text = {"type": "text", "text": "What is in this picture?"}
    body = {**BODY, "messages": [{"role": "user", "content": [text, part]}]}

    assert semantic_query(body, None) is None


def test_l3_embeds_the_words_with_their_roles_and_reads_text_parts_as_their_string():
    as_parts = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is the capital"},
                {"type": "text", "text": "of France?"},
            ],
        }
    ]
    plain = semantic_query(BODY, None)
    parts = semantic_query({**BODY, "messages": as_parts}, None)

    assert plain.text == "user: What is the capital of France?"
    assert parts.text == plain.text
    assert parts.partition == plain.partition


def test_only_the_words_may_differ_within_a_partition():
    other_words = {**BODY, "messages": [{"role": "user", "content": "And the capital of Spain?"}]}

    assert semantic_query(other_words, None).partition == semantic_query(BODY, None).partition
    for ignored in ({"user": "someone"}, {"stream": True}, {"metadata": {"run": "7"}}, {"model": "alias"}):
        assert semantic_query({**BODY, **ignored}, None).partition == semantic_query(BODY, None).partition


@pytest.mark.parametrize(
    "changed",
    [
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"tool_choice": "none"},
        {"response_format": {"type": "json_object"}},
        {"temperature": 0.2},
        {"top_p": 0.5},
        {"seed": 1},
        {"max_tokens": 10},
        {"stop": ["\n"]},
        {"n": 2},
        {"logit_bias": {"50256": -100}},
        {"a_parameter_of_next_year": 1},
        # The role structure: the same words said by the system, or in one more turn.
        {"messages": [{"role": "system", "content": "What is the capital of France?"}]},
        {"messages": [{"role": "system", "content": ""}, *BODY["messages"]]},
        {"messages": [{"role": "user", "name": "alice", "content": "What is the capital of France?"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "What?", "cache_control": {}}]}]},
    ],
)
def test_what_else_shapes_the_answer_is_another_partition(changed):
    assert semantic_query({**BODY, **changed}, None).partition != semantic_query(BODY, None).partition


def test_each_allowed_region_set_is_its_own_partition():
    partitions = {
        semantic_query(BODY, regions).partition
        for regions in (None, frozenset(), frozenset({"eu"}), frozenset({"us"}), frozenset({"eu", "us"}))
    }

    assert len(partitions) == 5
    assert (
        semantic_query(BODY, frozenset({"us", "eu"})).partition
        == semantic_query(BODY, frozenset({"eu", "us"})).partition
    )


def organization(**changes) -> OrganizationSnapshot:
    return OrganizationSnapshot(
        id="org", allowed_data_regions=frozenset(), log_bodies="full", limits_fail_mode="open", **changes
    )


def test_a_team_overrides_only_what_it_sets():
    org = organization(cache_ttl_seconds=600, cache_any_temperature=True)

    assert effective_settings(org, None).ttl_seconds == 600
    assert effective_settings(org, TeamSnapshot("t", "t", frozenset())) == effective_settings(org, None)
    overridden = effective_settings(
        org, TeamSnapshot("t", "t", frozenset(), cache_enabled=False, cache_ttl_seconds=60)
    )
    assert (overridden.enabled, overridden.ttl_seconds, overridden.any_temperature) == (False, 60, True)


def test_the_semantic_tier_needs_the_opt_in_and_an_embeddings_model():
    assert not effective_settings(organization(cache_semantic_enabled=True), None).semantic_enabled
    on = effective_settings(
        organization(
            cache_semantic_enabled=True, cache_embedding_model="embed", cache_semantic_threshold=0.9
        ),
        None,
    )
    assert (on.semantic_enabled, on.semantic_threshold, on.embedding_model) == (True, 0.9, "embed")
    team_off = TeamSnapshot("t", "t", frozenset(), cache_enabled=False)
    assert not effective_settings(
        organization(cache_semantic_enabled=True, cache_embedding_model="e"), team_off
    ).semantic_enabled
