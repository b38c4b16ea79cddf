"""/api/v1/policies: CRUD, validation, roles, the dry run, and another organization's policies."""

import pytest

from apps.core.errors import Conflict, InvalidRequest
from apps.policies import services
from apps.policies.models import Policy
from apps.policies.selectors import active_policy_snapshots
from tests.factories import TeamFactory, create_api_key
from tests.management.errors import assert_error
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

URL = "/api/v1/policies"
PII = {"name": "pii", "action": "redact", "detectors": ["email", "secret"], "patterns": [r"ACME-\d{4}"]}


def create(client, **values) -> dict:
    response = client.post(URL, {**PII, **values}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def outsiders_policy(outsider):
    return services.policy_create(
        organization=outsider.organization, data={"name": "theirs", "action": "block", "terms": ["x"]}
    )


def test_it_creates_lists_reads_changes_and_deletes_a_policy(session_client, team):
    body = create(session_client, scope={"teams": [str(team.id)], "models": ["gpt-4o-mini"]}, terms=["Titan"])

    assert body["scope"] == {"teams": [str(team.id)], "api_keys": [], "models": ["gpt-4o-mini"]}
    assert (body["order"], body["is_active"], body["apply_to_response"], body["max_prompt_chars"]) == (
        0,
        True,
        False,
        None,
    )
    assert body["created_at"].endswith("Z")
    assert [p["id"] for p in session_client.get(URL).json()["results"]] == [body["id"]]
    assert session_client.get(f"{URL}/{body['id']}").json() == body

    patched = session_client.patch(
        f"{URL}/{body['id']}", {"order": 5, "is_active": False, "apply_to_response": True}, format="json"
    )
    assert patched.status_code == 200
    assert (patched.json()["order"], patched.json()["is_active"], patched.json()["apply_to_response"]) == (
        5,
        False,
        True,
    )
    assert patched.json()["scope"]["teams"] == [str(team.id)]

    assert session_client.delete(f"{URL}/{body['id']}").status_code == 204
    assert_error(session_client.get(f"{URL}/{body['id']}"), 404, "not_found")


def test_an_invalid_regex_is_refused_with_its_error_and_position(session_client):
    error = assert_error(
        session_client.post(URL, {**PII, "patterns": ["ok", "ab(c"]}, format="json"), 400, "validation_error"
    )

    assert "Pattern 1" in error["fields"]["patterns"][0]
    assert "missing )" in error["fields"]["patterns"][0]
    assert "position 4" in error["fields"]["patterns"][0]
    assert Policy.objects.count() == 0


# Patterns that compile into a huge program or backtrack without end (issue 19, finding 1): each is
# refused when it is saved, naming its position, and never reaches a server's compile.
PATHOLOGICAL_PATTERNS = [
    ("(?:a{1000}){3000}", "too large"),  # 2.3 s and 750 MB to compile
    ("(?:a{1000}){30}", "too large"),  # 3.3 MB of program
    ("x{100000}", "too large"),
    ("(a+)+$", "searches too slowly"),
    ("(x+x+)+y", "searches too slowly"),
    (r"(\w+\s?)+$", "searches too slowly"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "searches too slowly"),
]


@pytest.mark.parametrize(("pattern", "why"), PATHOLOGICAL_PATTERNS)
def test_a_pattern_too_costly_to_compile_or_search_is_refused_at_save_naming_its_position(
    session_client, team, pattern, why
):
    policy = create(session_client, name="before")
    body = {**PII, "name": "costly", "patterns": ["ACME-[0-9]+", pattern]}

    error = assert_error(session_client.post(URL, body, format="json"), 400, "validation_error")
    patched = session_client.patch(f"{URL}/{policy['id']}", {"patterns": [pattern]}, format="json")

    assert error["fields"]["patterns"][0].startswith("Pattern 1 ") and why in error["fields"]["patterns"][0]
    assert "Pattern 0 " in assert_error(patched, 400, "validation_error")["fields"]["patterns"][0]
    assert list(Policy.objects.values_list("name", "patterns")) == [("before", [r"ACME-\d{4}"])]


def test_patterns_stored_unchecked_are_checked_when_the_policy_is_next_saved(session_client, organization):
    """A policy written around the services (or stored before the check) has no digest: the proxy
    blocks what it applies to (tests/proxy/test_policies.py); any save checks its patterns again."""
    good = Policy.objects.create(organization=organization, name="old", action="flag", patterns=["ACME"])
    bad = Policy.objects.create(organization=organization, name="bad", action="flag", patterns=["(a+)+$"])
    assert [s.rules_checked for s in active_policy_snapshots(organization.id)] == [False, False]

    assert session_client.patch(f"{URL}/{good.id}", {"order": 3}, format="json").status_code == 200
    refused = session_client.patch(f"{URL}/{bad.id}", {"order": 4}, format="json")

    assert "Pattern 0 searches too slowly" in assert_error(refused, 400, "validation_error")["message"]
    assert [(s.name, s.rules_checked) for s in active_policy_snapshots(organization.id)] == [
        ("bad", False),
        ("old", True),
    ]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"detectors": ["email", "passport"]}, "detectors"),
        ({"patterns": [r"(a)\1"]}, "patterns"),
        ({"action": "delete"}, "action"),
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"terms": ["t" * 201]}, "terms"),
        ({"patterns": ["x"] * 51}, "patterns"),
        ({"max_prompt_chars": 0}, "max_prompt_chars"),
        ({"order": 10**9}, "order"),
        ({"apply_to_response": 1}, "apply_to_response"),
        ({"colour": "red"}, "colour"),
        ({"scope": {"teams": ["not-an-id"]}}, "scope.teams"),
        ({"scope": {"regions": ["eu"]}}, "scope.regions"),
    ],
)
def test_it_refuses_invalid_values(session_client, values, field):
    error = assert_error(session_client.post(URL, {**PII, **values}, format="json"), 400, "validation_error")

    assert any(name.startswith(field) for name in error["fields"]), error["fields"]


def test_a_policy_that_does_nothing_or_a_block_that_redacts_answers_is_refused(session_client):
    assert_error(
        session_client.post(URL, {"name": "empty", "action": "flag"}, format="json"), 400, "validation_error"
    )
    error = assert_error(
        session_client.post(URL, {**PII, "action": "block", "apply_to_response": True}, format="json"),
        400,
        "validation_error",
    )
    assert "apply_to_response" in error["fields"]


def test_another_organizations_team_or_key_is_refused_like_an_unknown_one(session_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)
    their_key, _ = create_api_key(outsider.organization)

    foreign = assert_error(
        session_client.post(URL, {**PII, "scope": {"teams": [str(their_team.id)]}}, format="json"),
        400,
        "validation_error",
    )
    unknown = assert_error(
        session_client.post(
            URL, {**PII, "scope": {"teams": ["00000000-0000-4000-8000-000000000000"]}}, format="json"
        ),
        400,
        "validation_error",
    )
    key = assert_error(
        session_client.post(URL, {**PII, "scope": {"api_keys": [str(their_key.id)]}}, format="json"),
        400,
        "validation_error",
    )

    assert foreign["fields"] == unknown["fields"] == {"scope.teams": ["No such team in this organization."]}
    assert key["fields"] == {"scope.api_keys": ["No such API key in this organization."]}


def test_a_second_policy_with_the_same_name_is_a_conflict(session_client):
    create(session_client)

    assert_error(session_client.post(URL, PII, format="json"), 409, "policy_name_taken")


def test_members_read_and_only_admins_and_owners_write(organization, client_for, session_client):
    policy = create(session_client)
    member, admin = client_for(organization, "member"), client_for(organization, "admin")

    assert member.get(URL).status_code == 200
    assert_error(member.post(URL, {**PII, "name": "m"}, format="json"), 403, "permission_denied")
    assert_error(member.patch(f"{URL}/{policy['id']}", {"order": 1}, format="json"), 403, "permission_denied")
    assert_error(member.delete(f"{URL}/{policy['id']}"), 403, "permission_denied")
    assert_error(
        member.post(f"{URL}/dry-run", {"model": "m", "input": "x"}, format="json"), 403, "permission_denied"
    )
    assert admin.post(URL, {**PII, "name": "a"}, format="json").status_code == 201


def test_another_organizations_policy_is_invisible_and_untouchable(session_client, outsiders_policy):
    path = f"{URL}/{outsiders_policy.id}"

    assert session_client.get(URL).json()["results"] == []
    assert_error(session_client.get(path), 404, "not_found")
    assert_error(session_client.patch(path, {"is_active": False}, format="json"), 404, "not_found")
    assert_error(session_client.delete(path), 404, "not_found")
    outsiders_policy.refresh_from_db()
    assert outsiders_policy.is_active


def test_the_dry_run_shows_what_the_active_policies_would_do(session_client, outsiders_policy):
    create(session_client, apply_to_response=True)
    create(session_client, name="off", action="block", terms=["hello"], is_active=False)
    messages = [{"role": "user", "content": "hello x ada@example.com ACME-1234"}]

    body = session_client.post(
        f"{URL}/dry-run", {"model": "gpt-4o-mini", "messages": messages}, format="json"
    ).json()

    assert body["action"] == "redacted"
    assert body["blocked"] is False
    assert body["reason"] == "pii: email, pattern"  # in the text's order; the outsider's block is not theirs
    assert body["messages"] == [{"role": "user", "content": "hello x [REDACTED:email] [REDACTED:pattern]"}]
    assert body["decisions"] == [
        {"policy": "pii", "action": "redacted", "category": "email", "count": 1},
        {"policy": "pii", "action": "redacted", "category": "pattern", "count": 1},
    ]
    assert body["redacts_response"] is True


def test_the_dry_run_blocks_by_scope_and_reads_embeddings_input(session_client, team, api_key):
    create(
        session_client,
        name="team-block",
        action="block",
        detectors=["email"],
        patterns=[],
        scope={"teams": [str(team.id)], "api_keys": [str(api_key[0].id)]},
    )
    request = {"model": "text-embedding-3-small", "input": ["ada@example.com"]}

    unscoped = session_client.post(f"{URL}/dry-run", request, format="json").json()
    scoped = session_client.post(
        f"{URL}/dry-run", {**request, "team": team.slug, "api_key": str(api_key[0].id)}, format="json"
    ).json()

    assert unscoped["action"] is None and unscoped["input"] == ["ada@example.com"]
    assert (scoped["action"], scoped["blocked"], scoped["reason"]) == ("blocked", True, "team-block: email")


def test_the_dry_run_refuses_unknown_fields_and_another_organizations_team(session_client, outsider):
    their_team = TeamFactory(organization=outsider.organization)

    assert_error(
        session_client.post(f"{URL}/dry-run", {"model": "m", "input": "x", "stream": True}, format="json"),
        400,
        "validation_error",
    )
    assert_error(
        session_client.post(f"{URL}/dry-run", {"model": "m"}, format="json"), 400, "validation_error"
    )
    error = assert_error(
        session_client.post(
            f"{URL}/dry-run", {"model": "m", "input": "x", "team": their_team.slug}, format="json"
        ),
        400,
        "validation_error",
    )
    assert error["fields"] == {"team": ["No such team in this organization."]}


def test_every_write_bumps_the_configuration_generation(organization, django_capture_on_commit_callbacks):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        first = services.policy_create(
            organization=organization, data={"name": "a", "action": "flag", "terms": ["x"]}
        )
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        second = services.policy_create(
            organization=organization, data={"name": "b", "action": "flag", "terms": ["y"], "order": 1}
        )
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        services.policy_update(policy=first, data={"is_active": False})
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        services.policies_reorder(organization=organization, policy_ids=[second.id, first.id])
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        services.policy_delete(policy=first)
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        with pytest.raises(Conflict):
            services.policy_create(
                organization=organization, data={"name": "b", "action": "flag", "terms": ["z"]}
            )


def test_snapshots_are_the_active_policies_in_order(organization, outsider):
    services.policy_create(
        organization=organization, data={"name": "second", "action": "flag", "terms": ["x"], "order": 2}
    )
    services.policy_create(
        organization=organization,
        data={"name": "first", "action": "block", "detectors": ["email"], "order": 1},
    )
    services.policy_create(
        organization=organization, data={"name": "off", "action": "flag", "terms": ["x"], "is_active": False}
    )
    services.policy_create(
        organization=outsider.organization, data={"name": "theirs", "action": "flag", "terms": ["x"]}
    )

    snapshots = active_policy_snapshots(organization.id)

    assert [s.name for s in snapshots] == ["first", "second"]
    assert snapshots[0].detectors == ("email",)


def test_reordering_refuses_another_organizations_policy(organization, outsiders_policy):
    mine = services.policy_create(
        organization=organization, data={"name": "a", "action": "flag", "terms": ["x"]}
    )

    with pytest.raises(InvalidRequest):
        services.policies_reorder(organization=organization, policy_ids=[mine.id, outsiders_policy.id])


def test_the_admin_console_writes_through_the_services(
    admin_client, organization, django_capture_on_commit_callbacks
):
    form = {
        "organization": str(organization.id),
        "name": "from-admin",
        "action": "redact",
        "detectors": "email\nsecret",
        "patterns": "ab(c",
        "order": "0",
        "is_active": "on",
    }

    refused = admin_client.post("/admin/policies/policy/add/", form, follow=True)
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        created = admin_client.post("/admin/policies/policy/add/", {**form, "patterns": r"ACME-\d+"})

    assert "not a valid regular expression" in refused.content.decode()
    assert created.status_code == 302
    [policy] = Policy.objects.all()
    assert (policy.detectors, policy.patterns) == (["email", "secret"], [r"ACME-\d+"])


def test_a_policy_created_without_an_order_goes_after_the_last(session_client):
    first = create(session_client, name="first", terms=["a"])
    later = create(session_client, name="later", terms=["b"], order=7)
    last = create(session_client, name="last", terms=["c"])
    assert (first["order"], later["order"], last["order"]) == (0, 7, 8)
