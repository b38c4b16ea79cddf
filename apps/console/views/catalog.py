"""Models and prices: the organization's model aliases with their deployments, fallbacks and the price
each deployment costs now; create, edit and delete an alias; the price versions, and adding one.

Members read; admins and owners change, as the API allows: an alias is created, edited (its
deployments replaced whole) and deleted; a price is never edited, a change is a new version. The
forms are posted as the API's bodies to the catalog's services, which check them (apps/catalog/
inputs.py).
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone

from apps.catalog import selectors, services
from apps.catalog.models import ModelAlias
from apps.console.access import Console, console_view
from apps.console.forms import flag, labels, service_errors, text
from apps.core.errors import GatewayError
from apps.organizations.models import Role
from apps.providers.models import Provider

BLANK_DEPLOYMENT_ROWS = 2


def _priced(console: Console, aliases) -> list:
    """Each alias with its deployments and the price each costs now."""
    aliases = list(aliases)
    pairs = [(d.provider, d.upstream_model) for alias in aliases for d in alias.deployments.all()]
    prices = selectors.prices_in_force(console.organization.id, pairs, timezone.now())
    return [
        (alias, [(d, prices[(d.provider, d.upstream_model)]) for d in alias.deployments.all()])
        for alias in aliases
    ]


@console_view()
def model_list(request, console: Console):
    aliases = _priced(console, selectors.model_aliases_of(console.organization.id))
    return render(request, "console/catalog/list.html", {"console": console, "aliases": aliases})


def _alias_input(post) -> dict:
    """The alias form as the API's body: the deployment rows are parallel lists, a row without a model
    is left out (the form shows blank rows to add)."""
    deployments = []
    rows = zip(
        post.getlist("deployment_provider"),
        post.getlist("deployment_model"),
        post.getlist("deployment_priority"),
        strict=False,
    )
    for provider, model, priority in rows:
        if not model.strip() and not priority.strip():
            continue
        deployment = {"provider": provider, "upstream_model": model.strip()}
        if priority.strip():
            deployment["priority"] = priority.strip()
        deployments.append(deployment)
    data = {
        "alias": text(post, "alias") or "",
        "description": post.get("description", "").strip(),
        "deployments": deployments,
        "fallbacks": labels(post, "fallbacks"),
    }
    is_active = flag(post, "is_active")
    if is_active is not None:
        data["is_active"] = is_active
    return data


def _rows(post=None, model_alias: ModelAlias | None = None) -> list[dict]:
    """The deployment rows a form shows: what was posted, else the alias's, then blank ones."""
    if post is not None:
        rows = [
            {"provider": provider, "upstream_model": model, "priority": priority}
            for provider, model, priority in zip(
                post.getlist("deployment_provider"),
                post.getlist("deployment_model"),
                post.getlist("deployment_priority"),
                strict=False,
            )
            if model.strip() or priority.strip()
        ]
    elif model_alias is not None:
        rows = [
            {"provider": d.provider, "upstream_model": d.upstream_model, "priority": d.priority}
            for d in model_alias.deployments.all()
        ]
    else:
        rows = []
    return rows + [{"provider": "", "upstream_model": "", "priority": ""}] * BLANK_DEPLOYMENT_ROWS


def _form_context(console: Console, **extra) -> dict:
    return {"console": console, "providers": Provider.choices, **extra}


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def model_create(request, console: Console):
    if request.method == "GET":
        return render(request, "console/catalog/form.html", _form_context(console, rows=_rows()))
    try:
        model_alias = services.model_alias_create(
            organization=console.organization, data=_alias_input(request.POST)
        )
    except GatewayError as error:
        return render(
            request,
            "console/catalog/form.html",
            _form_context(console, errors=service_errors(error), form=request.POST, rows=_rows(request.POST)),
            status=error.status,
        )
    messages.success(request, f"Created {model_alias.alias}: applications can call it from the next request.")
    return redirect("console:model", alias_id=model_alias.id)


def _model_alias(console: Console, alias_id) -> ModelAlias:
    return get_object_or_404(selectors.model_aliases_of(console.organization.id), pk=alias_id)


def _detail(request, console: Console, model_alias: ModelAlias, *, errors=None, form=None, status=200):
    ((_, deployments),) = _priced(console, [model_alias])
    return render(
        request,
        "console/catalog/detail.html",
        _form_context(
            console,
            model_alias=model_alias,
            deployments=deployments,
            errors=errors or {},
            form=form,
            rows=_rows(form, model_alias),
        ),
        status=status,
    )


@console_view()
def model_detail(request, console: Console, alias_id):
    return _detail(request, console, _model_alias(console, alias_id))


@console_view(role=Role.ADMIN, methods=("POST",))
def model_update(request, console: Console, alias_id):
    model_alias = _model_alias(console, alias_id)
    try:
        services.model_alias_update(model_alias=model_alias, data=_alias_input(request.POST))
    except GatewayError as error:
        return _detail(
            request,
            console,
            _model_alias(console, alias_id),
            errors=service_errors(error),
            form=request.POST,
            status=error.status,
        )
    messages.success(request, f"Saved {model_alias.alias}.")
    return redirect("console:model", alias_id=model_alias.id)


@console_view(role=Role.ADMIN, methods=("POST",))
def model_delete(request, console: Console, alias_id):
    model_alias = _model_alias(console, alias_id)
    try:
        services.model_alias_delete(model_alias=model_alias)
    except GatewayError as error:
        return _detail(request, console, model_alias, errors=service_errors(error), status=error.status)
    messages.success(
        request, f"Deleted {model_alias.alias}; requests naming it are refused from the next one."
    )
    return redirect("console:models")


def _prices(request, console: Console, *, errors=None, form=None, status=200):
    now = timezone.now()
    versions = list(selectors.model_prices_of(console.organization.id))
    in_force = {}
    for version in versions:  # newest first per model: the first one already in effect is in force
        if version.effective_from <= now:
            in_force.setdefault((version.provider, version.model), version.id)
    return render(
        request,
        "console/catalog/prices.html",
        _form_context(
            console,
            versions=[(v, in_force.get((v.provider, v.model)) == v.id) for v in versions],
            now=now,
            shipped=selectors.shipped_prices(),
            errors=errors or {},
            form=form,
        ),
        status=status,
    )


@console_view()
def price_list(request, console: Console):
    return _prices(request, console)


def _price_input(post) -> dict:
    data = {
        name: post.get(name, "").strip()
        for name in ("provider", "model", "input_per_mtok", "output_per_mtok")
    }
    for name in ("cached_input_per_mtok", "reasoning_per_mtok", "effective_from"):
        value = text(post, name)
        if value is not None:
            data[name] = value
    return data


@console_view(role=Role.ADMIN, methods=("POST",))
def price_create(request, console: Console):
    try:
        price = services.model_price_create(
            organization=console.organization, data=_price_input(request.POST)
        )
    except GatewayError as error:
        return _prices(request, console, errors=service_errors(error), form=request.POST, status=error.status)
    messages.success(
        request,
        f"Added a price for {price.provider}/{price.model} from {price.effective_from:%Y-%m-%d %H:%M} UTC.",
    )
    return redirect("console:model-prices")


urlpatterns = [
    path("models/", model_list, name="models"),
    path("models/new", model_create, name="model-create"),
    path("models/prices/", price_list, name="model-prices"),
    path("models/prices/new", price_create, name="model-price-create"),
    path("models/<uuid:alias_id>/", model_detail, name="model"),
    path("models/<uuid:alias_id>/edit", model_update, name="model-update"),
    path("models/<uuid:alias_id>/delete", model_delete, name="model-delete"),
]
