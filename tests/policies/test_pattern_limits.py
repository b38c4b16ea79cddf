"""The save-time check of an organization's patterns and terms (apps/policies/patterns.py): its
wall-clock bound, the organization's bound, and property tests of the policy payload's patterns and
terms with the pathological ones as explicit cases (issue 19, finding 1, and the second outside
check's terms)."""

import random
import string

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.policies.engine import PolicyEngine
from apps.policies.models import Policy
from apps.policies.patterns import (
    ACTIVE_POLICIES_LIMIT,
    ORGANIZATION_COMPILE_SECONDS,
    PatternRefused,
    check_rules,
)
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


def _words(count: int, length: int, seed: int = 0) -> list[str]:
    letters = random.Random(seed)
    return ["".join(letters.choice(string.ascii_lowercase) for _ in range(length)) for _ in range(count)]


# The outside check's terms: 200 random words of 200 letters compile in 160-300 ms into 595 KB.
OUTSIDE_CHECK_TERMS = _words(200, 200)


@pytest.mark.django_db
@given(terms=st.lists(st.text(min_size=1, max_size=200), min_size=1, max_size=200))
@example(terms=OUTSIDE_CHECK_TERMS)
@example(terms=_words(200, 100))
@example(terms=["confidential", "project falcon", "a" * 200])
@example(terms=["(a+)+$", "x{100000}", "\\", "*", "[REDACTED:term]"])  # escaped: words, not patterns
@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_any_terms_are_accepted_and_then_scan_or_are_refused_with_their_field(session_client, terms):
    Policy.objects.all().delete()

    response = session_client.post(URL, {"name": "p", "action": "flag", "terms": terms}, format="json")

    assert response.status_code in (201, 400), response.content
    if response.status_code == 400:
        assert all(field.startswith("terms") for field in response.json()["error"]["fields"])
        assert not Policy.objects.exists()
        return
    [snapshot] = active_policy_snapshots(Policy.objects.get().organization_id)
    assert snapshot.rules_checked and snapshot.compile_micros <= 50_000
    engine = PolicyEngine.build([snapshot])
    body = {"model": "m", "messages": [{"role": "user", "content": "a" * 2000 + " " + terms[0]}]}
    engine.check_request(body, endpoint="chat.completions", model="m", team_id=None, api_key_id="k")


@pytest.mark.django_db
def test_the_outside_checks_terms_are_refused_when_saved_naming_the_field(session_client):
    response = session_client.post(
        URL, {"name": "big", "action": "flag", "terms": OUTSIDE_CHECK_TERMS}, format="json"
    )

    assert response.status_code == 400
    assert "The terms are too many or too long" in response.json()["error"]["fields"]["terms"][0]
    assert not Policy.objects.exists()


@pytest.mark.django_db
def test_an_organization_has_at_most_its_bound_of_active_policies(session_client, outsider):
    from apps.policies.services import policy_create

    for index in range(ACTIVE_POLICIES_LIMIT):
        policy_create(
            organization=outsider.organization,
            data={"name": f"o{index}", "action": "flag", "detectors": ["email"]},
        )
    for index in range(ACTIVE_POLICIES_LIMIT):
        body = {"name": f"p{index}", "action": "flag", "detectors": ["email"]}
        assert session_client.post(URL, body, format="json").status_code == 201

    refused = session_client.post(
        URL, {"name": "one more", "action": "flag", "detectors": ["email"]}, format="json"
    )
    inactive = session_client.post(
        URL, {"name": "spare", "action": "flag", "detectors": ["email"], "is_active": False}, format="json"
    )
    activated = session_client.patch(f"{URL}/{inactive.json()['id']}", {"is_active": True}, format="json")

    assert refused.status_code == 400 and "is_active" in refused.json()["error"]["fields"]
    assert inactive.status_code == 201
    assert activated.status_code == 400 and "at most 50 active" in activated.json()["error"]["message"]
    assert Policy.objects.filter(is_active=True, organization__policies__name="p0").distinct().count() == 50


@pytest.mark.django_db
def test_an_organizations_active_policies_compile_within_its_bound_together(
    session_client, outsider, monkeypatch
):
    """Each list compiles in about 10 ms into 110 KB (twice that on a busy machine), well inside one
    policy's 50 ms: together they reach the organization's 250 ms, and the next one is refused naming
    its field and the totals. Another organization's policies count for their organization only."""
    from apps.policies import patterns
    from apps.policies.services import policy_create

    # One list's own bound is not what this is about: on a slow host one list once took over 50 ms
    # and was refused for that, before the organization's bound was reached.
    monkeypatch.setitem(patterns._LIMITS, "compile_seconds", 1.0)

    policy_create(
        organization=outsider.organization,
        data={"name": "theirs", "action": "flag", "terms": _words(80, 40)},
    )
    refused = None
    for index in range(45):  # at most 50 may be active
        body = {"name": f"p{index}", "action": "flag", "terms": _words(80, 40, seed=index)}
        response = session_client.post(URL, body, format="json")
        if response.status_code != 201:
            refused = response
            break

    assert refused is not None and refused.status_code == 400, "the bound was never reached"
    message = refused.json()["error"]["fields"]["terms"][0]
    assert f"{ORGANIZATION_COMPILE_SECONDS * 1000:.0f} ms" in message and "The others take" in message
    mine = Policy.objects.exclude(name="theirs")
    assert 2 <= mine.count() < 45
    assert sum(mine.values_list("compile_micros", flat=True)) <= ORGANIZATION_COMPILE_SECONDS * 1_000_000


@pytest.mark.django_db
def test_measures_or_terms_changed_around_the_services_leave_the_policy_unchecked(session_client):
    created = session_client.post(URL, {"name": "t", "action": "flag", "terms": ["falcon"]}, format="json")
    organization_id = Policy.objects.get().organization_id
    assert [s.rules_checked for s in active_policy_snapshots(organization_id)] == [True]

    Policy.objects.update(compile_micros=0, program_bytes=0)  # understated, to pass the bound
    understated = [s.rules_checked for s in active_policy_snapshots(organization_id)]
    Policy.objects.update(terms=_words(200, 200))
    unmeasured = [s.rules_checked for s in active_policy_snapshots(organization_id)]
    again = session_client.patch(f"{URL}/{created.json()['id']}", {"order": 2}, format="json")

    assert understated == unmeasured == [False]
    assert again.status_code == 400 and "terms" in again.json()["error"]["fields"]  # checked again
