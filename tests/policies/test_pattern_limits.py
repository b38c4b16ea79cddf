"""The save-time check of an organization's patterns (apps/policies/patterns.py): its wall-clock
bound, and a property test of the policy payload's patterns with the pathological ones as explicit
cases (issue 19, finding 1)."""

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.policies.engine import PolicyEngine
from apps.policies.models import Policy
from apps.policies.patterns import PatternRefused, check_rules
from apps.policies.selectors import active_policy_snapshots
from tests.policies.test_policies_api import PATHOLOGICAL_PATTERNS

URL = "/api/v1/policies"


def test_the_check_never_waits_past_its_wall_clock_bound_and_refuses_what_it_could_not_finish():
    # However slow the machine, the child is killed at the bound: here it cannot even start in time.
    with pytest.raises(PatternRefused) as refused:
        check_rules(["ACME-[0-9]+", "ok"], [], wall_seconds=0.001)

    assert refused.value.position == 0
    assert "could not be compiled and tested within 0.001 s" in str(refused.value)


REGEX_PIECES = st.sampled_from(
    [
        "a",
        "b",
        "x",
        r"\d",
        r"\w",
        r"\s",
        ".",
        "+",
        "*",
        "?",
        "{2,5}",
        "{1000}",
        "(",
        ")",
        "(?:",
        "|",
        "$",
        "^",
    ]
)


@pytest.mark.django_db
@given(pattern=st.lists(REGEX_PIECES, min_size=1, max_size=12).map("".join))
@example(pattern="(?:a{1000}){3000}")
@example(pattern="(a+)+$")
@example(pattern="(x+x+)+y")
@example(pattern="ACME-\\d{4}")
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_pattern_is_accepted_and_then_scans_or_is_refused_with_its_field(session_client, pattern):
    Policy.objects.all().delete()

    response = session_client.post(URL, {"name": "p", "action": "flag", "patterns": [pattern]}, format="json")

    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert response.json()["error"]["fields"]["patterns"][0].startswith("Pattern 0 ")
        return
    [snapshot] = active_policy_snapshots(Policy.objects.get().organization_id)
    assert snapshot.rules_checked
    engine = PolicyEngine.build([snapshot])
    body = {"model": "m", "messages": [{"role": "user", "content": "a" * 2000 + "b"}]}
    engine.check_request(body, endpoint="chat.completions", model="m", team_id=None, api_key_id="k")


@pytest.mark.parametrize(("pattern", "why"), PATHOLOGICAL_PATTERNS)
def test_each_pathological_pattern_is_refused_by_the_check_itself(pattern, why):
    with pytest.raises(PatternRefused) as refused:
        check_rules([pattern], [])

    assert why in str(refused.value)
