"""Policies: the list in the order they run, create, edit, reorder, enable or disable, delete, and
the dry run (what the organization's active policies would do to a sample request).

A form is posted to the services as the API's body: they parse it (apps/policies/inputs.py) and check
it, and each write moves the organization's configuration generation, so every proxy worker applies
it on its next request; the dry run is the API's own (``selectors.policy_dry_run``)."""

import json

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path

from apps.catalog.selectors import model_aliases_of
from apps.console.access import Console, console_view, forbidden
from apps.console.forms import check, service_errors, text
from apps.core.detectors import DETECTOR_LABELS, DETECTOR_NAMES
from apps.core.errors import GatewayError
from apps.keys.selectors import api_keys_of
from apps.organizations.models import Role
from apps.policies import selectors, services
from apps.policies.api.serializers import DryRunSerializer
from apps.policies.models import Action, Policy
from apps.teams.selectors import teams_of

DIRECTIONS = ("up", "down")


# --- Reading the forms ----------------------------------------------------------------------------


def _lines(post: QueryDict, name: str, *, strip: bool = True) -> list[str]:
    """A one-item-per-line textarea as a list, blank lines dropped. Patterns keep their spaces."""
    found = []
    for line in post.get(name, "").splitlines():
        value = line.strip() if strip else line.rstrip("\r")
        if value.strip():
            found.append(value)
    return found


def _words(post: QueryDict, name: str) -> list[str]:
    """Model names, one per line or separated by commas."""
    return [word.strip() for line in _lines(post, name) for word in line.split(",") if word.strip()]


def _policy_input(post: QueryDict) -> dict:
    data = {
        "name": post.get("name", "").strip(),
        "action": post.get("action", ""),
        "detectors": post.getlist("detectors"),
        "patterns": _lines(post, "patterns", strip=False),
        "terms": _lines(post, "terms"),
        "denied_models": _words(post, "denied_models"),
        "max_prompt_chars": text(post, "max_prompt_chars"),
        "apply_to_response": post.get("apply_to_response") == "on",
        "is_active": post.get("is_active") == "on",
        "scope": {
            "teams": post.getlist("scope_teams"),
            "api_keys": post.getlist("scope_api_keys"),
            "models": _words(post, "scope_models"),
        },
    }
    order = text(post, "order")
    if order is not None:
        data["order"] = order
    return data


def _form_context(console: Console, **extra) -> dict:
    return {
        "console": console,
        "actions": Action.values,
        "detectors": [(name, DETECTOR_LABELS[name]) for name in DETECTOR_NAMES],
        "teams": teams_of(console.organization.id),
        "api_keys": api_keys_of(console.organization.id).filter(is_active=True),
        **extra,
    }


def _scope_names(console: Console) -> tuple[dict, dict]:
    teams = {str(team.id): team.name for team in teams_of(console.organization.id)}
    keys = {str(key.id): key.name for key in api_keys_of(console.organization.id)}
    return teams, keys


def _scope_summary(policy: Policy, teams: dict, keys: dict) -> list[str]:
    """The scope in words: ``["teams: Search", "models: gpt-4o"]``; empty means everything."""
    parts = []
    if policy.scope_teams:
        parts.append("teams: " + ", ".join(teams.get(value, "(deleted)") for value in policy.scope_teams))
    if policy.scope_api_keys:
        parts.append("keys: " + ", ".join(keys.get(value, "(deleted)") for value in policy.scope_api_keys))
    if policy.scope_models:
        parts.append("models: " + ", ".join(policy.scope_models))
    return parts


def _policy(console: Console, policy_id) -> Policy:
    return get_object_or_404(selectors.policies_of(console.organization.id), pk=policy_id)


# --- Pages ----------------------------------------------------------------------------------------


@console_view()
def policy_list(request, console: Console):
    policies = list(selectors.policies_of(console.organization.id))
    teams, keys = _scope_names(console)
    rows = [
        {
            "policy": policy,
            "scope": _scope_summary(policy, teams, keys),
            "first": index == 0,
            "last": index == len(policies) - 1,
        }
        for index, policy in enumerate(policies)
    ]
    return render(request, "console/policies/list.html", {"console": console, "rows": rows})


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def policy_create(request, console: Console):
    errors: dict = {}
    form = None
    status = 400
    if request.method == "POST":
        form = request.POST
        try:
            policy = services.policy_create(organization=console.organization, data=_policy_input(form))
        except GatewayError as error:
            errors, status = service_errors(error), error.status
        else:
            messages.success(request, f"Created the policy {policy.name}; it applies from the next request.")
            return redirect("console:policy", policy_id=policy.id)
    return render(
        request,
        "console/policies/form.html",
        _form_context(console, errors=errors, form=form, next_order=_next_order(console)),
        status=status if errors else 200,
    )


def _next_order(console: Console) -> int:
    return selectors.next_policy_order(console.organization.id, limit=services.ORDER_LIMIT)


def _detail(request, console: Console, policy: Policy, *, errors=None, form=None, status=None):
    teams, keys = _scope_names(console)
    return render(
        request,
        "console/policies/detail.html",
        _form_context(
            console,
            policy=policy,
            scope=_scope_summary(policy, teams, keys),
            errors=errors or {},
            form=form,
        ),
        status=status or (400 if errors else 200),
    )


@console_view()
def policy_detail(request, console: Console, policy_id):
    return _detail(request, console, _policy(console, policy_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def policy_update(request, console: Console, policy_id):
    policy = _policy(console, policy_id)
    try:
        services.policy_update(policy=policy, data=_policy_input(request.POST))
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Saved {policy.name}; it applies from the next request.")
        return redirect("console:policy", policy_id=policy.id)
    policy.refresh_from_db()  # the service may have set fields before it refused the whole
    return _detail(request, console, policy, errors=errors, form=request.POST, status=status)


@console_view(role=Role.ADMIN, methods=("POST",))
def policy_toggle(request, console: Console, policy_id):
    """Enables or disables a policy (``is_active`` = ``true`` or ``false``)."""
    policy = _policy(console, policy_id)
    wanted = {"true": True, "false": False}.get(request.POST.get("is_active"), request.POST.get("is_active"))
    try:
        services.policy_update(policy=policy, data={"is_active": wanted})
    except GatewayError as error:
        return _detail(request, console, policy, errors=service_errors(error))
    state = "enabled" if policy.is_active else "disabled"
    messages.success(request, f"{policy.name} is {state} from the next request.")
    # Back to the page the form was on: the policy's own, or the list.
    if request.POST.get("back") == "policy":
        return redirect("console:policy", policy_id=policy.id)
    return redirect("console:policies")


@console_view(role=Role.ADMIN, methods=("POST",))
def policy_move(request, console: Console, policy_id):
    """Moves a policy one place up or down in the order: every policy gets its new position (0, 1,
    2 ...) through the reorder service."""
    policy = _policy(console, policy_id)
    direction = request.POST.get("direction")
    if direction not in DIRECTIONS:
        return _detail(request, console, policy, errors={"direction": ["Up or down."]})
    ids = list(selectors.policies_of(console.organization.id).values_list("id", flat=True))
    index = ids.index(policy.id)
    other = index - 1 if direction == "up" else index + 1
    if 0 <= other < len(ids):
        ids[index], ids[other] = ids[other], ids[index]
        services.policies_reorder(organization=console.organization, policy_ids=ids)
        messages.success(
            request, f"Moved {policy.name} {direction}; the new order applies from the next request."
        )
    return redirect("console:policies")


@console_view(role=Role.ADMIN, methods=("POST",))
def policy_delete(request, console: Console, policy_id):
    policy = _policy(console, policy_id)
    services.policy_delete(policy=policy)
    messages.success(request, f"Deleted the policy {policy.name}.")
    return redirect("console:policies")


# --- Dry run --------------------------------------------------------------------------------------


def _dry_run_input(post: QueryDict) -> tuple[dict, dict]:
    """The sample request of the form as the API's dry run takes it. The sample box holds a whole
    request body (``{"model", "messages"}`` or ``{"model", "input"}``), a list of messages, or plain
    text (one user message); the model field names the model (over the body's), which plain text and
    a list of messages need: the dry run, like the proxy, matches policies' models on it."""
    data: dict = {}
    sample = post.get("sample", "")
    errors: dict = {}
    if not sample.strip():
        errors["sample"] = ["Paste a request body, a list of messages, or the text of a message."]
    else:
        try:
            parsed = json.loads(sample)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            data.update(
                {key: value for key, value in parsed.items() if key in ("model", "messages", "input")}
            )
        elif isinstance(parsed, list):
            data["messages"] = parsed
        else:
            data["messages"] = [{"role": "user", "content": sample}]
    model = text(post, "model")
    if model is not None:
        data["model"] = model
    elif "model" not in data and not errors:
        errors["model"] = [
            "Choose the model the request would name: plain text and a list of messages carry none, "
            "and policies scoped to models or denying them depend on it."
        ]
    for name in ("team", "api_key"):
        value = text(post, name)
        if value is not None:
            data[name] = value
    return data, errors


@console_view(methods=("GET", "POST"))
def policy_dry_run(request, console: Console):
    """Members see the form; running it needs an admin, as the API's dry run does."""
    errors: dict = {}
    result = None
    status = 200
    if request.method == "POST":
        if not console.can_change:
            return _refused(request, console)
        sample, errors = _dry_run_input(request.POST)
        if not errors:
            data, errors = check(DryRunSerializer, sample)
            if data is not None:
                try:
                    result = selectors.policy_dry_run(organization_id=console.organization.id, **data)
                except GatewayError as error:
                    errors = service_errors(error)
        status = 400 if errors else 200
    context = _form_context(
        console,
        errors=errors,
        form=request.POST if request.method == "POST" else None,
        result=result,
        policies=selectors.policies_of(console.organization.id).filter(is_active=True),
        aliases=model_aliases_of(console.organization.id).order_by("alias").values_list("alias", flat=True),
    )
    if request.headers.get("HX-Request") == "true":
        # htmx swaps only 2xx answers: the result (or the errors) goes in place with a 200.
        return render(request, "console/policies/_dry_run_result.html", context)
    return render(request, "console/policies/dry_run.html", context, status=status)


def _refused(request, console: Console):
    return forbidden(request, console, f"This needs the admin role; yours is {console.role}.")


urlpatterns = [
    path("policies/", policy_list, name="policies"),
    path("policies/new", policy_create, name="policy-create"),
    path("policies/dry-run", policy_dry_run, name="policy-dry-run"),
    path("policies/<uuid:policy_id>/", policy_detail, name="policy"),
    path("policies/<uuid:policy_id>/edit", policy_update, name="policy-update"),
    path("policies/<uuid:policy_id>/toggle", policy_toggle, name="policy-toggle"),
    path("policies/<uuid:policy_id>/move", policy_move, name="policy-move"),
    path("policies/<uuid:policy_id>/delete", policy_delete, name="policy-delete"),
]
