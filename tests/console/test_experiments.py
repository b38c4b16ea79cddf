"""The console's experiment pages: list, create and edit a draft, start, pause, resume, complete,
promote and delete as the API allows, and the results with every figure, the comparisons and the
verdict; roles, tenancy, CSRF and refused input."""

import re

import pytest

from apps.catalog.models import ModelAlias
from apps.experiments import services
from apps.experiments.models import Experiment, ExperimentStatus
from tests.console.conftest import post_form
from tests.experiments.conftest import make_alias, model_experiment
from tests.experiments.test_results import CONTROL, LARGE, entries, many
from tests.management.generations import bumps_generation
from tests.prompts.conftest import make_template

pytestmark = pytest.mark.django_db

LIST = "/console/experiments/"
NEW = "/console/experiments/new"


@pytest.fixture
def aliases(organization):
    """The organization's ``chat`` (gpt-4o-mini) and ``chat-large`` (gpt-4o) aliases."""
    return make_alias(organization, "chat", "gpt-4o-mini"), make_alias(organization, "chat-large", "gpt-4o")


def page_of(experiment) -> str:
    return f"/console/experiments/{experiment.id}/"


def variant_rows(*rows) -> dict:
    """Form fields for variant rows ``(name, weight, model, prompt_version, parameters)``."""
    fields = ("name", "weight", "model", "prompt_version", "parameters")
    padded = [tuple(row) + ("",) * (5 - len(row)) for row in rows]
    return {f"variant_{field}": [row[index] for row in padded] for index, field in enumerate(fields)}


def test_a_member_reads_experiments_and_their_results_and_never_another_organizations(
    console_for, organization, outsider, aliases
):
    experiment = model_experiment(organization, name="bigger model")
    services.experiment_start(experiment=experiment)
    make_alias(outsider.organization, "chat", "gpt-4o-mini")
    make_alias(outsider.organization, "chat-large", "gpt-4o")
    model_experiment(outsider.organization, name="their experiment")
    client = console_for(organization, "member")
    listing = client.get(LIST).content.decode()
    assert "bigger model" in listing and "their experiment" not in listing
    assert "Create an experiment" not in listing
    page = client.get(page_of(experiment)).content.decode()
    assert "control" in page and "50.0 %" in page and "Pause" not in page and "Promote" not in page
    assert client.get(f"{page_of(experiment)}results").status_code == 200


def test_an_admin_creates_a_model_experiment_as_a_draft(console_for, organization, aliases):
    client = console_for(organization, "admin")
    response = post_form(
        client,
        NEW,
        NEW,
        {
            "name": "bigger model",
            "target_kind": "model",
            "target_model": "chat",
            **variant_rows(("control", "90"), ("large", "10", "chat-large"), ("", "", "", "", "")),
        },
    )
    assert response.status_code == 302
    experiment = Experiment.objects.get(organization=organization)
    assert response["Location"] == page_of(experiment)
    assert (experiment.status, experiment.target_model) == (ExperimentStatus.DRAFT, "chat")
    assert list(experiment.variants.values_list("name", "weight", "model")) == [
        ("control", 90, ""),
        ("large", 10, "chat-large"),
    ]


def test_an_admin_creates_a_prompt_experiment_with_versions_and_parameters(console_for, organization):
    template = make_template(organization, "support", versions=3)
    client = console_for(organization, "admin")
    response = post_form(
        client,
        NEW,
        NEW,
        {
            "name": "shorter prompt",
            "target_kind": "prompt",
            "target_prompt": "support",
            "target_model": "ignored",
            **variant_rows(("v2", "1", "", "2"), ("v3", "1", "", "3", '{"temperature": 0.1}')),
        },
    )
    assert response.status_code == 302
    experiment = Experiment.objects.get(organization=organization)
    assert experiment.target_template == template and experiment.target_model == ""
    assert list(experiment.variants.values_list("prompt_version", "parameters")) == [
        (2, {}),
        (3, {"temperature": 0.1}),
    ]


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([("control", "1")], "at least 2"),
        ([("control", "1"), ("large", "1", "no-such-alias")], "no-such-alias"),
        ([("control", "-1"), ("large", "1")], "variants[0].weight"),
        ([("control", "0"), ("large", "0")], "weights"),
        ([("control", "1"), ("large", "1", "", "", "{temperature")], "Not valid JSON"),
        ([("control", "1"), ("large", "1", "", "", '{"stream": true}')], "variants[1].parameters"),
        ([("control", "1"), ("control", "1")], "control"),
    ],
)
def test_a_refused_experiment_says_why_and_saves_nothing(console_for, organization, aliases, rows, says):
    client = console_for(organization, "admin")
    data = {"name": "x", "target_kind": "model", "target_model": "chat", **variant_rows(*rows)}
    response = post_form(client, NEW, NEW, data)
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Experiment.objects.exists()


def test_the_form_offers_the_aliases_and_versions_as_choices_and_rejects_an_unknown_alias(
    console_for, organization, aliases
):
    make_template(organization, "support", versions=2)  # production -> 2
    client = console_for(organization, "admin")
    form = client.get(NEW).content.decode()
    target = re.search(r'<select name="target_model">.*?</select>', form, re.S).group(0)
    assert re.findall(r"<option>([^<]+)</option>", target) == ["chat", "chat-large"]
    variant_model = re.search(r'<select name="variant_model">.*?</select>', form, re.S).group(0)
    assert re.findall(r"<option>([^<]+)</option>", variant_model) == ["chat", "chat-large"]
    assert 'list="aliases"' not in form  # no free text where the aliases are known
    assert (
        '<optgroup label="support"><option value="2">version 2: production</option>'
        '<option value="1">version 1</option></optgroup>'
    ) in form
    example = '{"temperature": 0.2, "max_tokens": 512}'  # whole, in a box as wide as the row
    assert f'<textarea name="variant_parameters" rows="2" placeholder=\'{example}\'>' in form
    assert 'name="variant_parameters" placeholder' not in form  # no more one-line inputs

    data = {
        "name": "x",
        "target_kind": "model",
        "target_model": "gpt-5-nowhere",
        **variant_rows(("control", "1"), ("large", "1", "chat-large")),
    }
    response = post_form(client, NEW, NEW, data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "No model alias &#x27;gpt-5-nowhere&#x27; in this organization." in page
    assert '<option value="gpt-5-nowhere" selected>gpt-5-nowhere (not an alias of this organization)' in page
    assert "<option selected>chat-large</option>" in page  # the rows keep their choices
    assert not Experiment.objects.exists()


def test_a_drafts_parameters_are_shown_in_a_box_their_size(console_for, organization, aliases):
    experiment = model_experiment(
        organization, model="chat-large", parameters={"seed": 7, "temperature": 0.1}
    )
    form = console_for(organization, "admin").get(f"{page_of(experiment)}edit").content.decode()
    assert '<textarea name="variant_parameters" rows="4"' in form
    assert "{\n  &quot;seed&quot;: 7,\n  &quot;temperature&quot;: 0.1\n}</textarea>" in form


def test_a_target_of_another_organization_is_refused(console_for, organization, outsider):
    make_template(outsider.organization, "theirs")
    client = console_for(organization, "admin")
    data = {
        "name": "x",
        "target_kind": "prompt",
        "target_prompt": "theirs",
        **variant_rows(("a", "1"), ("b", "1")),
    }
    response = post_form(client, NEW, NEW, data)
    assert response.status_code == 400 and "target.prompt" in response.content.decode()
    assert not Experiment.objects.exists()


def test_an_admin_edits_a_draft_but_not_a_started_experiment(console_for, organization, aliases):
    experiment = model_experiment(organization)
    client = console_for(organization, "admin")
    edit = f"{page_of(experiment)}edit"
    form = client.get(edit).content.decode()
    assert "<option selected>chat-large</option>" in form and 'value="bigger model"' in form
    data = {
        "name": "renamed",
        "target_kind": "model",
        "target_model": "chat",
        **variant_rows(("control", "1"), ("large", "3", "chat-large")),
    }
    assert post_form(client, edit, edit, data).status_code == 302
    experiment.refresh_from_db()
    assert experiment.name == "renamed"
    assert list(experiment.variants.values_list("weight", flat=True)) == [1, 3]
    services.experiment_start(experiment=experiment)
    assert client.get(edit).status_code == 302
    response = post_form(client, page_of(experiment), edit, {**data, "name": "again"})
    assert (
        response.status_code == 409 and "only one that is draft can be changed" in response.content.decode()
    )
    experiment.refresh_from_db()
    assert experiment.name == "renamed"


def test_the_lifecycle_through_the_buttons(
    console_for, organization, aliases, django_capture_on_commit_callbacks
):
    experiment = model_experiment(organization)
    client = console_for(organization, "admin")
    page = page_of(experiment)
    assert f'action="{page}start"' in client.get(page).content.decode()
    for action, status in (
        ("start", ExperimentStatus.RUNNING),
        ("pause", ExperimentStatus.PAUSED),
        ("resume", ExperimentStatus.RUNNING),
        ("complete", ExperimentStatus.COMPLETED),
    ):
        with bumps_generation(organization, django_capture_on_commit_callbacks):
            response = post_form(client, page, f"{page}{action}", {})
        assert response.status_code == 302, action
        experiment.refresh_from_db()
        assert experiment.status == status
    assert "Complete without a winner" not in client.get(page).content.decode()


def test_a_move_out_of_order_is_a_conflict_shown_on_the_page(console_for, organization, aliases):
    experiment = model_experiment(organization)
    client = console_for(organization, "admin")
    page = page_of(experiment)
    response = post_form(client, page, f"{page}pause", {})
    assert response.status_code == 409
    assert "This experiment is a draft; only one that is running can be paused." in response.content.decode()
    experiment.refresh_from_db()
    assert experiment.status == ExperimentStatus.DRAFT
    assert post_form(client, page, f"{page}explode", {}).status_code == 404


def test_a_second_experiment_on_a_busy_target_cannot_start(console_for, organization, aliases):
    first = model_experiment(organization, name="first")
    second = model_experiment(organization, name="second")
    services.experiment_start(experiment=first)
    client = console_for(organization, "admin")
    response = post_form(client, page_of(second), f"{page_of(second)}start", {})
    assert response.status_code == 409 and "Another experiment is running" in response.content.decode()
    second.refresh_from_db()
    assert second.status == ExperimentStatus.DRAFT


def test_promoting_a_model_variant_moves_the_alias_once(console_for, organization, aliases):
    experiment = model_experiment(organization)
    services.experiment_start(experiment=experiment)
    client = console_for(organization, "admin")
    page = page_of(experiment)
    response = post_form(client, page, f"{page}promote", {"variant": "large"})
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.status == ExperimentStatus.COMPLETED and experiment.winner.name == "large"
    assert experiment.promoted_by == client.membership.user
    alias = ModelAlias.objects.get(organization=organization, alias="chat")
    assert list(alias.deployments.values_list("upstream_model", flat=True)) == ["gpt-4o"]
    html = client.get(page).content.decode()
    assert "now routes to" in html and "gpt-4o" in html and 'name="variant"' not in html
    again = post_form(client, page, f"{page}promote", {"variant": "control"})
    assert again.status_code == 409 and "promoted already" in again.content.decode()


def test_a_refused_promotion_says_why(console_for, organization, aliases):
    experiment = services.experiment_create(
        organization=organization,
        data={
            "name": "cool",
            "target": {"model": "chat"},
            "variants": [
                {"name": "control", "weight": 1},
                {"name": "cool", "weight": 1, "parameters": {"temperature": 0}},
            ],
        },
    )
    services.experiment_start(experiment=experiment)
    client = console_for(organization, "admin")
    page = page_of(experiment)
    response = post_form(client, page, f"{page}promote", {"variant": "cool"})
    assert response.status_code == 409 and "cannot carry" in response.content.decode()
    response = post_form(client, page, f"{page}promote", {"variant": "nobody"})
    assert response.status_code == 400 and "No variant of this name" in response.content.decode()
    experiment.refresh_from_db()
    assert experiment.status == ExperimentStatus.RUNNING and experiment.winner is None


def test_only_a_draft_is_deleted(console_for, organization, aliases):
    draft = model_experiment(organization, name="draft")
    running = model_experiment(organization, name="running")
    services.experiment_start(experiment=running)
    client = console_for(organization, "admin")
    assert post_form(client, LIST, f"{page_of(draft)}delete", {}).status_code == 302
    response = post_form(client, LIST, f"{page_of(running)}delete", {})
    assert response.status_code == 409
    assert list(Experiment.objects.values_list("name", flat=True)) == ["running"]


def test_the_results_show_every_figure_the_comparisons_and_the_verdict(console_for, organization, aliases):
    experiment = model_experiment(organization)
    services.experiment_start(experiment=experiment)
    entries(organization, experiment, "control", CONTROL)
    entries(organization, experiment, "large", LARGE)
    client = console_for(organization, "member")
    page = client.get(f"{page_of(experiment)}results").content.decode()
    assert "Verdict: not enough data" in page
    # Per variant: control 5 requests, 2 errors (40.00 %), its Wilson interval; cost as people read it.
    control = page[page.index('aria-label="Variant control"') : page.index('aria-label="Variant large"')]
    assert "<dt>Requests</dt><dd>5 " in control and "<dt>Errors</dt><dd>2</dd>" in control
    assert "40.00 %" in control and re.search(r"\d+\.\d\d % to \d+\.\d\d %", control)
    assert "$0.00031 <small>in all" in control and "(2 streamed)" in control
    large = page[page.index('aria-label="Variant large"') :]
    assert "$0.0018 <small>in all" in large and "230 ms" in large
    # Against the control: every metric, with its difference, interval, p-value and verdict.
    for label in ("Error rate", "Mean latency", "Cost per request", "Feedback score"):
        assert f'{label} <span class="pill' in page
    assert "-40.00 pp" in page and "p-value</dt><dd>" in page and "two-proportion z-test" in page
    assert "+$0.00054" in page  # 0.0006 - 0.000062
    assert "<table" not in page  # cards, readable at phone width


def test_a_decided_result_names_the_best_variant(console_for, organization, aliases):
    experiment = model_experiment(organization)
    services.experiment_start(experiment=experiment)
    latencies = [100 + n % 20 for n in range(400)]
    many(organization, experiment, "control", latencies, status_of=lambda n: 500 if n % 5 == 0 else 200)
    many(organization, experiment, "large", latencies, status_of=lambda n: 500 if n % 50 == 0 else 200)
    page = console_for(organization, "member").get(f"{page_of(experiment)}results").content.decode()
    assert "Verdict: variant better</strong>. Best variant: <strong>large</strong>" in page
    assert "verdict-better" in page and "&lt; 0.001" in page
    # Equal costs: a difference of zero reads as money, not as 0E-8.
    assert "+$0<" in page and "E-8" not in page


@pytest.mark.parametrize(
    ("path", "data"),
    [
        (NEW, {"name": "sneaky", "target_kind": "model", "target_model": "chat"}),
        ("{page}edit", {"name": "renamed"}),
        ("{page}start", {}),
        ("{page}promote", {"variant": "large"}),
        ("{page}delete", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, aliases, path, data):
    experiment = model_experiment(organization)
    client = console_for(organization, "member")
    response = post_form(client, LIST, path.format(page=page_of(experiment)), data)
    assert response.status_code == 403
    experiment.refresh_from_db()
    assert (experiment.name, experiment.status) == ("bigger model", ExperimentStatus.DRAFT)
    assert Experiment.objects.count() == 1


@pytest.mark.parametrize("suffix", ["", "results", "edit", "start", "pause", "promote", "delete"])
def test_another_organizations_experiment_answers_404(console_for, organization, outsider, suffix):
    make_alias(outsider.organization, "chat", "gpt-4o-mini")
    make_alias(outsider.organization, "chat-large", "gpt-4o")
    theirs = model_experiment(outsider.organization, name="theirs")
    client = console_for(organization, "owner")
    path = f"{page_of(theirs)}{suffix}"
    response = (
        client.get(path) if suffix in ("", "results") else post_form(client, LIST, path, {"variant": "large"})
    )
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert (theirs.name, theirs.status) == ("theirs", ExperimentStatus.DRAFT)


def test_a_post_without_the_csrf_token_is_refused(console_for, organization, aliases):
    experiment = model_experiment(organization)
    client = console_for(organization, "owner")
    assert client.post(f"{page_of(experiment)}start", {}).status_code == 403
    experiment.refresh_from_db()
    assert experiment.status == ExperimentStatus.DRAFT
