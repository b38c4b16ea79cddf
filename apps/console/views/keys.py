"""API keys: list, create (the key shown once), edit limits and budget, revoke.

Input is written through the API's services, which check it (apps/keys/inputs.py)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.cache import never_cache

from apps.console.access import Console, console_view
from apps.console.forms import labels, limits_input, service_errors, text
from apps.core.errors import GatewayError
from apps.keys import selectors, services
from apps.keys.models import ApiKey, Permission
from apps.limits.api.serializers import attached_limits
from apps.limits.models import BudgetPeriod, Scope
from apps.limits.usage import usage_of
from apps.organizations.models import Role
from apps.teams.selectors import may_read_team_usage, teams_of


def _form_context(console: Console, **extra) -> dict:
    return {
        "console": console,
        "teams": teams_of(console.organization.id),
        "permissions": Permission.choices,
        "periods": BudgetPeriod.values,
        **extra,
    }


def _key_input(post, *, creating: bool) -> dict:
    data = {"name": text(post, "name"), **limits_input(post)}
    regions = [region for region in post.get("allowed_data_regions", "").replace(",", " ").split() if region]
    data["allowed_data_regions"] = regions
    data["allowed_models"] = labels(post, "allowed_models")
    expires_at = text(post, "expires_at")
    data["expires_at"] = expires_at
    if creating:
        data["permissions"] = post.getlist("permissions") or [Permission.LLM.value]
        data["team_id"] = text(post, "team_id")
    elif data["name"] is None:
        del data["name"]
    return {name: value for name, value in data.items() if value is not None or name != "name"}


@console_view()
def api_key_list(request, console: Console):
    keys = selectors.api_keys_of(console.organization.id)
    return render(request, "console/keys/list.html", {"console": console, "api_keys": keys})


@never_cache  # the answer to a create carries the only copy of the key
@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def api_key_create(request, console: Console):
    errors: dict = {}
    if request.method == "POST":
        try:
            api_key, secret = services.api_key_create(
                organization=console.organization,
                created_by=console.user,
                data=_key_input(request.POST, creating=True),
            )
        except GatewayError as error:
            errors = service_errors(error)
        else:
            return render(
                request,
                "console/keys/created.html",
                {"console": console, "api_key": api_key, "secret": secret, "warning": services.KEY_WARNING},
                status=201,
            )
    return render(
        request,
        "console/keys/form.html",
        _form_context(console, errors=errors, form=request.POST),
        status=400 if errors else 200,
    )


def _usage(console: Console, api_key: ApiKey):
    """The key's usage, if the caller may read it (``may_read_team_usage``: the API's rule)."""
    if not may_read_team_usage(membership=console.membership, team_id=api_key.team_id):
        return None
    return usage_of(
        organization=console.organization,
        scope=Scope.API_KEY,
        scope_id=api_key.id,
        limits=attached_limits(api_key),
        now=timezone.now(),
    )


def _detail(request, console: Console, api_key: ApiKey, *, errors=None, form=None):
    return render(
        request,
        "console/keys/detail.html",
        _form_context(
            console,
            api_key=api_key,
            limits=attached_limits(api_key),
            usage=_usage(console, api_key),
            errors=errors or {},
            form=form,
        ),
        status=400 if errors else 200,
    )


@console_view()
def api_key_detail(request, console: Console, key_id):
    return _detail(
        request, console, get_object_or_404(selectors.api_keys_of(console.organization.id), pk=key_id)
    )


@console_view(role=Role.ADMIN, methods=("POST",))
def api_key_update(request, console: Console, key_id):
    api_key = get_object_or_404(selectors.api_keys_of(console.organization.id), pk=key_id)
    try:
        services.api_key_update(api_key=api_key, data=_key_input(request.POST, creating=False))
    except GatewayError as error:
        errors = service_errors(error)
    else:
        messages.success(request, f"Saved {api_key.name}.")
        return redirect("console:api-key", key_id=api_key.id)
    return _detail(request, console, api_key, errors=errors, form=request.POST)


@console_view(role=Role.ADMIN, methods=("POST",))
def api_key_revoke(request, console: Console, key_id):
    api_key = get_object_or_404(selectors.api_keys_of(console.organization.id), pk=key_id)
    services.api_key_revoke(api_key=api_key)
    messages.success(request, f"Revoked {api_key.name}; requests with it are refused from now on.")
    return redirect("console:api-key", key_id=api_key.id)


urlpatterns = [
    path("api-keys/", api_key_list, name="api-keys"),
    path("api-keys/new", api_key_create, name="api-key-create"),
    path("api-keys/<uuid:key_id>/", api_key_detail, name="api-key"),
    path("api-keys/<uuid:key_id>/edit", api_key_update, name="api-key-update"),
    path("api-keys/<uuid:key_id>/revoke", api_key_revoke, name="api-key-revoke"),
]
