"""Experiments: the list, create and edit a draft (a target, variants with weights, the first the
control), start, pause, resume, complete, promote and delete as the API allows them, and the results
(every per-variant figure of the API's results, the comparisons against the control and the
verdict).

Input is checked and written by the API's services, which parse it with apps/experiments/inputs.py
(start, pause, resume, complete and promote move the configuration generation and raise the experiment
events); a move the status does not allow is refused by the service (409), shown on the experiment's page."""

import json

from django.contrib import messages
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path

from apps.catalog.selectors import model_aliases_of
from apps.console.access import Console, console_view
from apps.console.forms import check, digits, service_errors
from apps.core.errors import GatewayError
from apps.experiments import selectors, services
from apps.experiments.api.serializers import PromoteSerializer
from apps.experiments.models import Experiment, ExperimentStatus
from apps.experiments.results import experiment_results
from apps.organizations.models import Role
from apps.prompts.selectors import templates_of

# Variant rows the create form offers (the first is the control); more than this: edit the draft.
VARIANT_ROWS = 4
S = ExperimentStatus
# What each action does, and the statuses the API allows it from (the service decides; these only
# choose which buttons a page shows).
ACTIONS = {
    "start": (services.experiment_start, (S.DRAFT,), "started: requests to the target are split from now on"),
    "pause": (services.experiment_pause, (S.RUNNING,), "paused: the target is served as if there were none"),
    "resume": (services.experiment_resume, (S.PAUSED,), "resumed: every unit gets the variant it had"),
    "complete": (
        services.experiment_complete,
        (S.RUNNING, S.PAUSED),
        "completed without a winner: the target stays as it is",
    ),
}
PROMOTABLE = (S.RUNNING, S.PAUSED, S.COMPLETED)


def _experiments(console: Console):
    return (
        selectors.experiments_of(console.organization.id)
        .select_related("target_template", "winner", "promoted_by")
        .prefetch_related("variants")
    )


def _experiment(console: Console, experiment_id) -> Experiment:
    return get_object_or_404(_experiments(console), pk=experiment_id)


# --- Reading the form -----------------------------------------------------------------------------


def _whole(value: str):
    """Digits as a whole number; anything else as typed, for the serializer to refuse."""
    value = value.strip()
    number = digits(value, max_digits=9)
    return value if number is None else number


def _experiment_input(post: QueryDict) -> tuple[dict, dict]:
    errors: dict = {}
    kind = post.get("target_kind", "model")
    target_value = (post.get("target_prompt") if kind == "prompt" else post.get("target_model")) or ""
    data: dict = {
        "name": post.get("name", "").strip(),
        "target": {kind if kind in ("model", "prompt") else "model": target_value.strip()},
        "variants": [],
    }
    for row in _variant_rows(post):
        if not any(row.values()):
            continue
        index = len(data["variants"])
        variant: dict = {"name": row["name"], "weight": _whole(row["weight"])}
        if row["model"]:
            variant["model"] = row["model"]
        if row["prompt_version"]:
            variant["prompt_version"] = _whole(row["prompt_version"])
        if row["parameters"]:
            try:
                variant["parameters"] = json.loads(row["parameters"])
            except (ValueError, RecursionError) as error:
                errors[f"variants[{index}].parameters"] = [f"Not valid JSON: {error}."]
        data["variants"].append(variant)
    return data, errors


def _variant_rows(post: QueryDict) -> list[dict]:
    fields = ("name", "weight", "model", "prompt_version", "parameters")
    columns = {field: post.getlist(f"variant_{field}") for field in fields}
    count = max((len(values) for values in columns.values()), default=0)
    return [
        {field: (columns[field][index] if index < len(columns[field]) else "").strip() for field in fields}
        for index in range(count)
    ]


def _rows_of(experiment: Experiment | None) -> list[dict]:
    if experiment is None:
        return [
            {"name": "control", "weight": "50", "model": "", "prompt_version": "", "parameters": ""},
            {"name": "treatment", "weight": "50", "model": "", "prompt_version": "", "parameters": ""},
        ]
    return [
        {
            "name": variant.name,
            "weight": str(variant.weight),
            "model": variant.model,
            "prompt_version": "" if variant.prompt_version is None else str(variant.prompt_version),
            "parameters": json.dumps(variant.parameters, indent=2) if variant.parameters else "",
        }
        for variant in experiment.variants.all()
    ]


def _version_groups(console: Console) -> list[tuple[str, list[tuple[str, str]]]]:
    """The prompt version picker: each template (by slug) with its versions, newest first, named with
    the labels that point at them (``("support", [("2", "version 2: production"), ("1", "version 1")])``)."""
    groups = []
    templates = templates_of(console.organization.id).order_by("slug").prefetch_related("versions", "labels")
    for template in templates:
        labels_of: dict[int, list[str]] = {}
        for label in sorted(template.labels.all(), key=lambda label: label.name):
            labels_of.setdefault(label.version_id, []).append(label.name)
        versions = sorted(template.versions.all(), key=lambda version: -version.number)
        choices = [
            (
                str(version.number),
                f"version {version.number}"
                + (f": {', '.join(labels_of[version.id])}" if version.id in labels_of else ""),
            )
            for version in versions
        ]
        groups.append((template.slug, choices))
    return groups


def _form(request, console: Console, *, experiment: Experiment | None, errors=None, status=400):
    target = services.target_of(experiment) if experiment is not None else {}
    if request.method == "POST":
        rows = _variant_rows(request.POST)
        form = request.POST
        chosen = {"model": form.get("target_model", ""), "prompt": form.get("target_prompt", "")}
    else:
        rows = _rows_of(experiment)
        form = None
        chosen = {"model": target.get("model", ""), "prompt": target.get("prompt", "")}
    blank = {"name": "", "weight": "", "model": "", "prompt_version": "", "parameters": ""}
    rows = rows + [blank] * max(VARIANT_ROWS - len(rows), 1)
    version_groups = _version_groups(console)
    offered = {
        value
        for slug, choices in version_groups
        if slug == chosen["prompt"] or not chosen["prompt"]
        for value, _ in choices
    }
    for row in rows:
        row["parameters_rows"] = max(2, row["parameters"].count("\n") + 1)  # the box fits what it holds
        # A version the picker does not offer (of no template the target names) is kept, marked.
        row["version_unlisted"] = bool(row["prompt_version"]) and row["prompt_version"] not in offered
    return render(
        request,
        "console/experiments/form.html",
        {
            "console": console,
            "experiment": experiment,
            "target": target,
            "chosen": chosen,
            "aliases": list(
                model_aliases_of(console.organization.id).order_by("alias").values_list("alias", flat=True)
            ),
            "templates": templates_of(console.organization.id).order_by("slug"),
            "version_groups": version_groups,
            "parameters": services.PARAMETERS,
            "rows": rows,
            "form": form,
            "errors": errors or {},
        },
        status=status if errors else 200,
    )


# --- Pages ----------------------------------------------------------------------------------------


@console_view()
def experiment_list(request, console: Console):
    return render(
        request, "console/experiments/list.html", {"console": console, "experiments": _experiments(console)}
    )


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def experiment_create(request, console: Console):
    if request.method == "GET":
        return _form(request, console, experiment=None)
    data, errors = _experiment_input(request.POST)
    status = 400
    if not errors:
        try:
            experiment = services.experiment_create(organization=console.organization, data=data)
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Created the draft {experiment.name}; start it when it is ready.")
            return redirect("console:experiment", experiment_id=experiment.id)
    return _form(request, console, experiment=None, errors=errors, status=status)


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def experiment_update(request, console: Console, experiment_id):
    """A draft's name, target and variants (all replaced); a started experiment is refused (409)."""
    experiment = _experiment(console, experiment_id)
    if request.method == "GET":
        if experiment.status != S.DRAFT:
            messages.error(request, f"{experiment.name} has started: only a draft can be changed.")
            return redirect("console:experiment", experiment_id=experiment.id)
        return _form(request, console, experiment=experiment)
    data, errors = _experiment_input(request.POST)
    status = 400
    if not errors:
        try:
            services.experiment_update(experiment=experiment, data=data)
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Saved the draft {experiment.name}.")
            return redirect("console:experiment", experiment_id=experiment.id)
    if status == 409:
        return _detail(request, console, _experiment(console, experiment_id), errors=errors, status=409)
    return _form(request, console, experiment=experiment, errors=errors, status=status)


def _detail(request, console: Console, experiment: Experiment, *, errors=None, status=200):
    variants = list(experiment.variants.all())
    total = sum(variant.weight for variant in variants) or 1
    return render(
        request,
        "console/experiments/detail.html",
        {
            "console": console,
            "experiment": experiment,
            "target": services.target_of(experiment),
            "variants": [(variant, variant.weight / total) for variant in variants],
            "can_start": experiment.status in ACTIONS["start"][1],
            "can_pause": experiment.status in ACTIONS["pause"][1],
            "can_resume": experiment.status in ACTIONS["resume"][1],
            "can_complete": experiment.status in ACTIONS["complete"][1],
            "can_promote": experiment.status in PROMOTABLE and experiment.promoted_at is None,
            "errors": errors or {},
        },
        status=status if errors else 200,
    )


@console_view()
def experiment_detail(request, console: Console, experiment_id):
    return _detail(request, console, _experiment(console, experiment_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def experiment_action(request, console: Console, experiment_id, action: str):
    if action not in ACTIONS:
        raise Http404
    experiment = _experiment(console, experiment_id)
    service, _, done = ACTIONS[action]
    try:
        service(experiment=experiment)
    except GatewayError as error:
        return _detail(
            request,
            console,
            _experiment(console, experiment_id),
            errors=service_errors(error),
            status=error.status,
        )
    messages.success(request, f"{experiment.name} {done}.")
    return redirect("console:experiment", experiment_id=experiment.id)


@console_view(role=Role.ADMIN, methods=("POST",))
def experiment_promote(request, console: Console, experiment_id):
    """Ends the experiment with the variant as its winner and moves the target to it."""
    experiment = _experiment(console, experiment_id)
    data, errors = check(PromoteSerializer, {"variant": request.POST.get("variant", "")})
    status = 400
    if data is not None:
        try:
            services.experiment_promote(experiment=experiment, variant=data["variant"], user=console.user)
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Promoted {data['variant']}: the target now serves it.")
            return redirect("console:experiment", experiment_id=experiment.id)
    return _detail(request, console, _experiment(console, experiment_id), errors=errors, status=status)


@console_view(role=Role.ADMIN, methods=("POST",))
def experiment_delete(request, console: Console, experiment_id):
    """Drafts only: a started experiment's results and history stay (409)."""
    experiment = _experiment(console, experiment_id)
    try:
        services.experiment_delete(experiment=experiment)
    except GatewayError as error:
        return _detail(request, console, experiment, errors=service_errors(error), status=error.status)
    messages.success(request, f"Deleted the draft {experiment.name}.")
    return redirect("console:experiments")


@console_view()
def experiment_result(request, console: Console, experiment_id):
    experiment = _experiment(console, experiment_id)
    results = experiment_results(experiment)
    comparisons: dict[str, list[dict]] = {}
    for comparison in results["comparisons"]:
        comparisons.setdefault(comparison["variant"], []).append(comparison)
    return render(
        request,
        "console/experiments/results.html",
        {
            "console": console,
            "experiment": experiment,
            "target": services.target_of(experiment),
            "results": results,
            "total_weight": sum(variant["weight"] for variant in results["variants"]) or 1,
            "comparisons": [(name, found) for name, found in comparisons.items()],
        },
    )


urlpatterns = [
    path("experiments/", experiment_list, name="experiments"),
    path("experiments/new", experiment_create, name="experiment-create"),
    path("experiments/<uuid:experiment_id>/", experiment_detail, name="experiment"),
    path("experiments/<uuid:experiment_id>/edit", experiment_update, name="experiment-update"),
    path("experiments/<uuid:experiment_id>/results", experiment_result, name="experiment-results"),
    path("experiments/<uuid:experiment_id>/promote", experiment_promote, name="experiment-promote"),
    path("experiments/<uuid:experiment_id>/delete", experiment_delete, name="experiment-delete"),
    path(
        "experiments/<uuid:experiment_id>/<slug:action>",
        experiment_action,
        name="experiment-action",
    ),
]
