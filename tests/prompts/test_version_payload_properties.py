"""Property tests of the prompt-version payload: whatever an admin posts as a version, the API answers
201 with exactly what it stored, or 400 in the management error shape naming the field, and a refused
version leaves nothing behind. Never a 500.

Hypothesis builds versions that are nearly right (the shape the API takes, with template tags well
and badly formed, variables declared or not, defaults of every JSON type, nesting deep enough to
reach Python's recursion limit) and the explicit examples replay what reviews found."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.prompts.models import PromptVersion
from tests.prompts.conftest import SUPPORT, make_template

pytestmark = pytest.mark.django_db

URL = "/api/v1/prompt-templates/support/versions"
EXAMPLES = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI stays reproducible
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

names = st.sampled_from(["company", "language", "question", "tone", "1st", "a b", "", "ünïcode", "__class__"])
text = st.text(st.characters(codec="utf-8"), max_size=30)
tags = st.one_of(
    names.map(lambda name: "{{" + name + "}}"),
    names.map(lambda name: "{{ " + name + " }}"),
    st.sampled_from(["{{", "}}", "{{ user.name }}", "{{{{x}}}}", "{% if x %}", "{{question", "\x00"]),
)
contents = st.lists(text | tags, max_size=5).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=10,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "robot"])},
        optional={"content": contents | json_values, "name": text},
    ),
    max_size=4,
)
variables = st.lists(
    st.fixed_dictionaries({"name": names | json_values}, optional={"default": text | json_values}),
    max_size=4,
)
defaults = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "model": text | json_values,
            "temperature": st.floats(allow_nan=False, allow_infinity=False) | json_values,
            "max_tokens": st.integers() | json_values,
            "tools": json_values,
            "response_format": json_values,
            "stream": st.booleans(),
        },
    ),
    json_values,
)
versions = st.fixed_dictionaries(
    {"messages": messages | json_values, "variables": variables | json_values, "defaults": defaults},
    optional={"note": text | json_values, "version": st.integers()},
)


@EXAMPLES
@given(payload=versions)
@example(payload=SUPPORT)
@example(payload={**SUPPORT, "messages": [{"role": "user", "content": "{{question}}" * 10_000}]})
@example(payload={**SUPPORT, "messages": [{"role": "user", "content": "{{ question \x00 }}"}]})
def test_a_version_is_stored_as_sent_or_refused_naming_the_field(payload, session_client, organization):
    if not organization.prompt_templates.filter(slug="support").exists():
        make_template(organization, versions=0, label=None)
    before = PromptVersion.objects.count()

    response = session_client.post(URL, json.dumps(payload), content_type="application/json")

    assert_stored_or_refused(response, payload, before, session_client)


def assert_stored_or_refused(response, payload, before: int, session_client) -> None:
    assert response.status_code in (201, 400), response.content
    assert response["Content-Type"] == "application/json"
    if response.status_code == 400:
        error = response.json()["error"]
        assert error["code"] == "validation_error"
        assert error["message"]
        assert error["fields"] and all(isinstance(words, list) for words in error["fields"].values())
        assert PromptVersion.objects.count() == before
        return
    created = response.json()
    assert PromptVersion.objects.count() == before + 1
    assert created["messages"] == payload["messages"]
    assert created["defaults"] == payload["defaults"]
    assert session_client.get(f"{URL}/{created['version']}").json() == created


def deeply_nested(depth: int) -> str:
    """JSON nested past Python's recursion limit, written as text (json.dumps cannot)."""
    return '{"a": ' * depth + '"x"' + "}" * depth


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({**SUPPORT, "defaults": {"tools": "@"}}).replace('"@"', deeply_nested(5_000)),
        json.dumps({**SUPPORT, "variables": [{"name": "company", "default": "@"}]}).replace(
            '"@"', deeply_nested(5_000)
        ),
        json.dumps({**SUPPORT, "messages": "@"}).replace('"@"', deeply_nested(5_000)),
    ],
    ids=["defaults", "variable-default", "messages"],
)
def test_a_version_nested_past_the_recursion_limit_is_refused(body, session_client, organization):
    make_template(organization, versions=0, label=None)

    response = session_client.post(URL, body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] in ("validation_error", "parse_error")
    assert PromptVersion.objects.count() == 0
