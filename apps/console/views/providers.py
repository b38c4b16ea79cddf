"""Provider keys: list (with each key's circuit breaker), add (the secret is write-only), edit weight,
region and the rest, enable or disable, rotate (a new secret in place, no gap), delete, and test a key
against its upstream (one model-list request, apps/providers/upstream_check.py).

Members read; admins and owners change. Every write is the API's service (the configuration generation
is bumped), which checks the form's input as it checks the API's body (apps/providers/inputs.py). A
secret posted here is never put back in a page, not even in a form shown again after an error: only its
last four characters are ever shown.
"""

from django.conf import settings
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path

from apps.audit.breaker_history import breaker_states
from apps.console.access import Console, console_view
from apps.console.forms import flag, service_errors, text
from apps.core.errors import GatewayError
from apps.organizations.models import Role
from apps.providers import selectors, services
from apps.providers.models import DEFAULT_BASE_URLS, Provider, ProviderKey
from apps.providers.upstream_check import upstream_check

SECRET = "key"  # the form field that carries a secret: never echoed


def _without_secret(post) -> dict:
    """What a form shown again may repeat of the posted values."""
    return {name: post.get(name) for name in post if name not in (SECRET, "csrfmiddlewaretoken")}


def _health(console: Console) -> dict:
    return breaker_states(console.organization.id)


@console_view()
def provider_key_list(request, console: Console):
    health = _health(console)
    keys = [(key, health.get(str(key.id))) for key in selectors.provider_keys_of(console.organization.id)]
    return render(
        request,
        "console/providers/list.html",
        {
            "console": console,
            "rows": keys,
            "breaker_failures": settings.GATEWAY_BREAKER_FAILURES,
            "breaker_cooldown": settings.GATEWAY_BREAKER_COOLDOWN_SECONDS,
        },
    )


def _create_input(post) -> dict:
    data = {
        "provider": text(post, "provider"),
        "name": post.get("name", "").strip(),
        "key": post.get(SECRET, ""),
        "data_region": text(post, "data_region") or "",
        "base_url": post.get("base_url", "").strip(),
        "api_version": post.get("api_version", "").strip(),
    }
    weight = text(post, "weight")
    if weight is not None:
        data["weight"] = weight
    for name in ("supports_stream_usage", "speaks_responses"):
        value = flag(post, name)
        if value is not None:
            data[name] = value
    return {name: value for name, value in data.items() if value is not None}


def _form(request, console: Console, *, errors=None, form=None, status=200):
    return render(
        request,
        "console/providers/form.html",
        {
            "console": console,
            "providers": Provider.choices,
            "default_base_urls": {str(p): url for p, url in DEFAULT_BASE_URLS.items()},
            "errors": errors or {},
            "form": form,
        },
        status=status,
    )


@console_view(role=Role.ADMIN, methods=("GET", "POST"))
def provider_key_create(request, console: Console):
    if request.method == "GET":
        return _form(request, console)
    try:
        provider_key = services.provider_key_create(
            organization=console.organization, data=_create_input(request.POST)
        )
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(
            request,
            f"Added {provider_key}. The secret is stored encrypted and never shown again; "
            "only its last four characters are.",
        )
        return redirect("console:provider-key", key_id=provider_key.id)
    return _form(request, console, errors=errors, form=_without_secret(request.POST), status=status)


def _detail(
    request,
    console: Console,
    provider_key: ProviderKey,
    *,
    failed="",
    errors=None,
    form=None,
    status=200,
    check=None,
):
    """``failed``: the form whose errors are shown (edit or rotate); ``check``: a test's outcome."""
    return render(
        request,
        "console/providers/detail.html",
        {
            "console": console,
            "provider_key": provider_key,
            "health": _health(console).get(str(provider_key.id)),
            "failed": failed,
            "errors": errors or {},
            "form": form,
            "check": check,
        },
        status=status,
    )


def _provider_key(console: Console, key_id) -> ProviderKey:
    return get_object_or_404(selectors.provider_keys_of(console.organization.id), pk=key_id)


@console_view()
def provider_key_detail(request, console: Console, key_id):
    return _detail(request, console, _provider_key(console, key_id))


def _update_input(post, provider_key: ProviderKey) -> dict:
    """A PATCH of the fields the form carries: a form of one button (disable) changes one field. The
    base URL is sent only when it changed, with the secret for it (the API's rule); a secret without a
    new base URL is sent too, for the service to point to rotate."""
    data: dict = {}
    for name in ("name", "data_region", "api_version"):
        if name in post:
            data[name] = post[name].strip()
    if "weight" in post:
        data["weight"] = post["weight"].strip()
    for name in ("is_active", "supports_stream_usage", "speaks_responses"):
        value = flag(post, name)
        if value is not None:
            data[name] = value
    base_url = post.get("base_url")
    if base_url is not None and base_url.strip().rstrip("/") != provider_key.base_url.rstrip("/"):
        data["base_url"] = base_url.strip()
    if post.get(SECRET):
        data["key"] = post[SECRET]
    return data


@console_view(role=Role.ADMIN, methods=("POST",))
def provider_key_update(request, console: Console, key_id):
    provider_key = _provider_key(console, key_id)
    try:
        services.provider_key_update(
            provider_key=provider_key, data=_update_input(request.POST, provider_key)
        )
    except GatewayError as error:
        errors, status = service_errors(error), error.status
    else:
        messages.success(request, f"Saved {provider_key}.")
        return redirect("console:provider-key", key_id=provider_key.id)
    provider_key.refresh_from_db()
    return _detail(
        request,
        console,
        provider_key,
        failed="edit",
        errors=errors,
        form=_without_secret(request.POST),
        status=status,
    )


@console_view(role=Role.ADMIN, methods=("POST",))
def provider_key_rotate(request, console: Console, key_id):
    provider_key = _provider_key(console, key_id)
    try:
        provider_key = services.provider_key_rotate(
            provider_key=provider_key, data={"key": request.POST.get(SECRET, "")}
        )
    except GatewayError as error:
        return _detail(
            request, console, provider_key, failed="rotate", errors=service_errors(error), status=error.status
        )
    messages.success(
        request,
        f"Rotated: the key now ends in …{provider_key.key_hint}. Requests that start from now on use the new "
        "secret on every worker; the old one is discarded.",
    )
    return redirect("console:provider-key", key_id=provider_key.id)


@console_view(role=Role.ADMIN, methods=("POST",))
def provider_key_test(request, console: Console, key_id):
    """Admins only, as every use of the secret outside routing: one request to the key's upstream,
    shown in place (htmx) or on the key's page."""
    provider_key = _provider_key(console, key_id)
    check = upstream_check(provider_key)
    if request.headers.get("HX-Request") == "true":
        return render(request, "console/providers/_upstream_check.html", {"check": check})
    return _detail(request, console, provider_key, check=check)


@console_view(role=Role.ADMIN, methods=("POST",))
def provider_key_delete(request, console: Console, key_id):
    provider_key = _provider_key(console, key_id)
    label = str(provider_key)
    services.provider_key_delete(provider_key=provider_key)
    messages.success(request, f"Deleted {label}; the next request routes without it.")
    return redirect("console:provider-keys")


urlpatterns = [
    path("provider-keys/", provider_key_list, name="provider-keys"),
    path("provider-keys/new", provider_key_create, name="provider-key-create"),
    path("provider-keys/<uuid:key_id>/", provider_key_detail, name="provider-key"),
    path("provider-keys/<uuid:key_id>/edit", provider_key_update, name="provider-key-update"),
    path("provider-keys/<uuid:key_id>/rotate", provider_key_rotate, name="provider-key-rotate"),
    path("provider-keys/<uuid:key_id>/test", provider_key_test, name="provider-key-test"),
    path("provider-keys/<uuid:key_id>/delete", provider_key_delete, name="provider-key-delete"),
]
