"""The console's policy pages: the list in order, create, edit, reorder, enable and disable, delete,
and the dry run; roles, tenancy, CSRF and refused input."""

import pytest

from apps.core.detectors import DETECTOR_LABELS, DETECTOR_NAMES
from apps.policies import services
from apps.policies.models import Policy
from tests.console.conftest import csrf_token, post_form
from tests.experiments.conftest import make_alias
from tests.factories import TeamFactory, create_api_key
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

LIST = "/console/policies/"
NEW = "/console/policies/new"
DRY_RUN = "/console/policies/dry-run"


def make_policy(organization, name="pii", **values):
    values.setdefault("action", "redact")
    values.setdefault("detectors", ["email"])
    return services.policy_create(organization=organization, data={"name": name, **values})


def test_a_member_reads_the_policies_in_order_and_never_another_organizations(
    console_for, organization, outsider
):
    make_policy(organization, "second", order=5)
    make_policy(organization, "first", order=1, action="block", terms=["titan"], detectors=[])
    make_policy(outsider.organization, "their-policy")
    client = console_for(organization, "member")
    page = client.get(LIST).content.decode()
    assert page.index(">first</a>") < page.index(">second</a>")
    assert "their-policy" not in page
    assert "Create a policy" not in page and "Disable" not in page  # members read only
    detail = client.get(f"/console/policies/{Policy.objects.get(name='first').id}/").content.decode()
    assert "titan" in detail and "Save" not in detail


def test_an_admin_creates_a_policy_through_the_service(
    console_for, organization, django_capture_on_commit_callbacks
):
    team = TeamFactory(organization=organization, name="Research")
    api_key, _ = create_api_key(organization, name="batch")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            NEW,
            NEW,
            {
                "name": "pii",
                "action": "redact",
                "detectors": ["email", "phone"],
                "patterns": "ACME-\\d{4}\r\n\r\nINV-[0-9]+",
                "terms": "project titan\nskunkworks",
                "denied_models": "o1, o1-pro",
                "max_prompt_chars": "5000",
                "apply_to_response": "on",
                "scope_teams": [str(team.id)],
                "scope_api_keys": [str(api_key.id)],
                "scope_models": "gpt-4o",
                "is_active": "on",
            },
        )
    assert response.status_code == 302
    policy = Policy.objects.get(organization=organization, name="pii")
    assert response["Location"] == f"/console/policies/{policy.id}/"
    assert policy.detectors == ["email", "phone"]
    assert policy.patterns == ["ACME-\\d{4}", "INV-[0-9]+"]
    assert policy.terms == ["project titan", "skunkworks"]
    assert policy.denied_models == ["o1", "o1-pro"]
    assert (policy.max_prompt_chars, policy.apply_to_response, policy.is_active) == (5000, True, True)
    assert policy.scope_teams == [str(team.id)] and policy.scope_api_keys == [str(api_key.id)]
    assert policy.scope_models == ["gpt-4o"]
    page = client.get(response["Location"]).content.decode()
    assert "Research" in page and "batch" in page


def test_a_new_policy_goes_last_unless_an_order_is_given(console_for, organization):
    make_policy(organization, "existing", order=7)
    client = console_for(organization, "admin")
    post_form(client, NEW, NEW, {"name": "later", "action": "flag", "terms": "x", "is_active": "on"})
    assert Policy.objects.get(name="later").order == 8


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"name": "bad", "action": "redact", "patterns": "(unclosed"}, "not a valid regular expression"),
        ({"name": "empty", "action": "flag"}, "at least one of detectors"),
        ({"name": "x", "action": "flag", "terms": "y", "max_prompt_chars": "many"}, "max_prompt_chars"),
        ({"name": "x", "action": "explode", "terms": "y"}, "is not a valid choice"),
        ({"name": "x", "action": "block", "terms": "y", "apply_to_response": "on"}, "Only redact policies"),
    ],
)
def test_a_refused_policy_says_why_and_saves_nothing(console_for, organization, data, says):
    client = console_for(organization, "admin")
    response = post_form(client, NEW, NEW, data)
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Policy.objects.exists()


def test_a_scope_naming_another_organizations_team_is_refused(console_for, organization, outsider):
    theirs = TeamFactory(organization=outsider.organization)
    client = console_for(organization, "admin")
    response = post_form(
        client, NEW, NEW, {"name": "x", "action": "flag", "terms": "y", "scope_teams": [str(theirs.id)]}
    )
    assert response.status_code == 400
    assert "No such team in this organization." in response.content.decode()
    assert not Policy.objects.exists()


def test_a_taken_name_is_a_conflict(console_for, organization):
    make_policy(organization, "pii")
    client = console_for(organization, "admin")
    response = post_form(client, NEW, NEW, {"name": "pii", "action": "flag", "terms": "y"})
    assert response.status_code == 409
    assert "A policy named &#x27;pii&#x27; exists already." in response.content.decode()
    assert Policy.objects.count() == 1


def test_an_admin_edits_a_policy(console_for, organization):
    policy = make_policy(organization, "pii", patterns=["a+"])
    client = console_for(organization, "admin")
    page = f"/console/policies/{policy.id}/"
    response = post_form(
        client,
        page,
        f"{page}edit",
        {"name": "pii-strict", "action": "block", "detectors": ["email", "iban"], "order": "3"},
    )
    assert response.status_code == 302
    policy.refresh_from_db()
    assert (policy.name, policy.action, policy.detectors, policy.order) == (
        "pii-strict",
        "block",
        ["email", "iban"],
        3,
    )
    # Every field of the form is the policy's new state: emptied boxes empty the lists.
    assert policy.patterns == [] and policy.is_active is False


def test_a_refused_edit_keeps_the_policy_and_shows_the_input(console_for, organization):
    policy = make_policy(organization, "pii")
    client = console_for(organization, "admin")
    page = f"/console/policies/{policy.id}/"
    response = post_form(client, page, f"{page}edit", {"name": "pii", "action": "redact", "patterns": "(x"})
    assert response.status_code == 400
    assert "(x" in response.content.decode()
    policy.refresh_from_db()
    assert policy.patterns == [] and policy.detectors == ["email"]


def test_an_admin_disables_and_enables_a_policy(
    console_for, organization, django_capture_on_commit_callbacks
):
    policy = make_policy(organization)
    client = console_for(organization, "admin")
    toggle = f"/console/policies/{policy.id}/toggle"
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, LIST, toggle, {"is_active": "false"})
    assert response.status_code == 302 and response["Location"] == LIST
    policy.refresh_from_db()
    assert policy.is_active is False
    response = post_form(client, LIST, toggle, {"is_active": "true", "back": "policy"})
    assert response["Location"] == f"/console/policies/{policy.id}/"
    policy.refresh_from_db()
    assert policy.is_active is True
    assert post_form(client, LIST, toggle, {"is_active": "maybe"}).status_code == 400


def test_an_admin_moves_policies_up_and_down(console_for, organization):
    first = make_policy(organization, "first", order=10)
    second = make_policy(organization, "second", order=20)
    third = make_policy(organization, "third", order=30)
    client = console_for(organization, "admin")
    response = post_form(client, LIST, f"/console/policies/{third.id}/move", {"direction": "up"})
    assert response.status_code == 302
    names = list(Policy.objects.order_by("order").values_list("name", flat=True))
    assert names == ["first", "third", "second"]
    post_form(client, LIST, f"/console/policies/{first.id}/move", {"direction": "down"})
    assert list(Policy.objects.order_by("order").values_list("name", flat=True)) == [
        "third",
        "first",
        "second",
    ]
    # The top one cannot go higher; nothing changes.
    post_form(client, LIST, f"/console/policies/{third.id}/move", {"direction": "up"})
    assert Policy.objects.order_by("order").first().name == "third"
    page = client.get(LIST).content.decode()
    assert page.index(">third</a>") < page.index(">first</a>") < page.index(f">{second.name}</a>")


def test_an_admin_deletes_a_policy(console_for, organization):
    policy = make_policy(organization)
    client = console_for(organization, "admin")
    response = post_form(client, LIST, f"/console/policies/{policy.id}/delete", {})
    assert response.status_code == 302
    assert not Policy.objects.filter(id=policy.id).exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        (NEW, {"name": "sneaky", "action": "flag", "terms": "x"}),
        ("/console/policies/{id}/edit", {"name": "renamed", "action": "flag", "terms": "x"}),
        ("/console/policies/{id}/toggle", {"is_active": "false"}),
        ("/console/policies/{id}/move", {"direction": "down"}),
        ("/console/policies/{id}/delete", {}),
        (DRY_RUN, {"sample": "mail ada@example.com", "model": "gpt-4o"}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    policy = make_policy(organization, "kept")
    make_policy(organization, "other", order=5)
    client = console_for(organization, "member")
    response = post_form(client, LIST, path.format(id=policy.id), data)
    assert response.status_code == 403
    policy.refresh_from_db()
    assert (policy.name, policy.is_active, policy.order) == ("kept", True, 0)
    assert Policy.objects.filter(organization=organization).count() == 2
    assert "ada@example.com" not in response.content.decode()


@pytest.mark.parametrize("suffix", ["", "edit", "toggle", "move", "delete"])
def test_another_organizations_policy_answers_404(console_for, organization, outsider, suffix):
    theirs = make_policy(outsider.organization, "theirs")
    client = console_for(organization, "owner")
    path = f"/console/policies/{theirs.id}/{suffix}"
    data = {"name": "mine", "action": "flag", "terms": "x", "is_active": "false", "direction": "up"}
    response = client.get(path) if not suffix else post_form(client, LIST, path, data)
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.name == "theirs" and theirs.is_active


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    policy = make_policy(organization)
    client = console_for(organization, "owner")
    response = client.post(f"/console/policies/{policy.id}/delete", {})
    assert response.status_code == 403
    assert Policy.objects.filter(id=policy.id).exists()


def test_the_dry_run_shows_what_the_policies_would_do(console_for, organization):
    make_policy(organization, "pii", detectors=["email"], apply_to_response=True)
    make_policy(organization, "titan", action="flag", detectors=[], terms=["project titan"], order=2)
    make_policy(organization, "off", action="block", detectors=["email"], is_active=False, order=3)
    client = console_for(organization, "admin")
    response = post_form(
        client,
        DRY_RUN,
        DRY_RUN,
        {
            "sample": '{"model": "gpt-4o-mini", "messages": [{"role": "user", '
            '"content": "mail ada@example.com about project titan"}]}',
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "Redacted" in page
    assert "mail [REDACTED:email] about project titan" in page
    assert "x-gateway-policy-reason: pii: email" in page
    assert '<td>titan</td><td>flagged</td><td>Denied term <code class="hint">term</code></td>' in page
    assert 'Email address <code class="hint">email</code>' in page  # the detector, for people
    assert "A redact policy would redact the answer too." in page
    assert "ada@example.com</pre>" not in page


def test_the_dry_run_takes_plain_text_and_a_team(console_for, organization):
    team = TeamFactory(organization=organization, slug="research")
    make_policy(organization, "research-only", action="block", scope={"teams": [str(team.id)]})
    client = console_for(organization, "owner")
    data = {"sample": "write to ada@example.com", "model": "gpt-4o"}
    page = post_form(client, DRY_RUN, DRY_RUN, data).content.decode()
    assert "Passes" in page and "write to ada@example.com" in page
    page = post_form(client, DRY_RUN, DRY_RUN, {**data, "team": str(team.id)}).content.decode()
    assert "Blocked" in page and "policy_blocked" in page


def test_the_dry_run_answers_htmx_with_the_result_alone(console_for, organization):
    make_policy(organization)
    client = console_for(organization, "admin")
    token = csrf_token(client, DRY_RUN)
    response = client.post(
        DRY_RUN,
        {"sample": "ada@example.com", "model": "m", "csrfmiddlewaretoken": token},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith('<section id="dry-run-result"') and "<html" not in page
    assert "[REDACTED:email]" in page
    refused = client.post(
        DRY_RUN, {"sample": "x", "csrfmiddlewaretoken": token}, headers={"HX-Request": "true"}
    )
    assert refused.status_code == 200 and "model" in refused.content.decode()


def test_detectors_are_offered_and_shown_by_their_names_for_people(console_for, organization):
    assert set(DETECTOR_LABELS) == set(DETECTOR_NAMES)
    client = console_for(organization, "admin")
    form = client.get(NEW).content.decode()
    for name in DETECTOR_NAMES:
        assert DETECTOR_LABELS[name] != name
        assert f'value="{name}"> {DETECTOR_LABELS[name]} <code class="hint">{name}</code>' in form
    assert "Payment card number" in form and "US Social Security number" in form
    policy = make_policy(organization, detectors=["payment_card", "us_ssn"])
    page = client.get(f"/console/policies/{policy.id}/").content.decode()
    assert "Payment card number (<code>payment_card</code>), US Social Security number" in page


def test_the_dry_run_says_plain_text_needs_a_model_and_offers_the_aliases(console_for, organization):
    make_alias(organization, "support-chat", "gpt-4o")
    client = console_for(organization, "admin")
    form = client.get(DRY_RUN).content.decode()
    assert "Text and a list name no model: choose it below." in form
    assert '<option value="support-chat">' in form and 'list="dry-run-models"' in form
    refused = post_form(client, DRY_RUN, DRY_RUN, {"sample": "mail ada@example.com"})
    assert refused.status_code == 400
    assert "Choose the model the request would name" in refused.content.decode()
    make_policy(organization)
    data = {"sample": "mail ada@example.com", "model": "support-chat"}
    page = post_form(client, DRY_RUN, DRY_RUN, data).content.decode()
    assert "mail [REDACTED:email]" in page


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"sample": "hello"}, "Choose the model the request would name"),
        ({"sample": "", "model": "m"}, "Paste a request body"),
        ({"sample": "[1, 2]", "model": "m"}, "messages"),
        ({"sample": '{"model": "m", "messages": [], "input": "x"}'}, "Give one of messages or input."),
    ],
)
def test_a_refused_dry_run_says_why(console_for, organization, data, says):
    client = console_for(organization, "admin")
    response = post_form(client, DRY_RUN, DRY_RUN, data)
    assert response.status_code == 400
    assert says in response.content.decode()


def test_the_dry_run_refuses_another_organizations_team_and_key(console_for, organization, outsider):
    their_team = TeamFactory(organization=outsider.organization)
    their_key, _ = create_api_key(outsider.organization)
    client = console_for(organization, "admin")
    for field, value, message in (
        ("team", str(their_team.id), "No such team in this organization."),
        ("api_key", str(their_key.id), "No such API key in this organization."),
    ):
        response = post_form(client, DRY_RUN, DRY_RUN, {"sample": "x", "model": "m", field: value})
        assert response.status_code == 400
        assert message in response.content.decode()


def test_a_member_sees_the_dry_run_page_without_its_form(console_for, organization):
    client = console_for(organization, "member")
    page = client.get(DRY_RUN).content.decode()
    assert "needs the admin role" in page and 'name="sample"' not in page


def test_a_sample_nested_beyond_reason_is_refused_not_a_500(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(
        client, "/console/policies/dry-run", "/console/policies/dry-run", {"sample": "[" * 5000 + "]" * 5000}
    )
    assert response.status_code == 400
