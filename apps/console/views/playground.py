"""The playground: a chat completion sent through this gateway's own proxy, from the browser.

The page's script (static/console/playground.js) posts to ``/v1/chat/completions`` on this origin, as
any client of the proxy does, so a stream shows as it arrives and the ``x-gateway-*`` headers are read
from the answer itself; the console never imports the proxy. The browser needs a key's secret, which the
gateway does not keep: an admin or owner gets a short-lived key made for them
(``apps.keys.services.playground_key_create``), which the page keeps in the tab's session storage until
it expires; anyone may paste a key of their own instead. The request's log entry is written a moment
after the answer (the outbox), so its summary is polled here until it is recorded.
"""

import uuid

from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path
from django.views.decorators.cache import never_cache

from apps.audit.selectors import entries_of
from apps.catalog.selectors import model_aliases_of, suggested_chat_models
from apps.console.access import Console, console_view
from apps.console.forms import digits, text
from apps.core.api.exceptions import management_exception_handler
from apps.core.brand import header_names
from apps.core.errors import GatewayError
from apps.keys.services import PLAYGROUND_KEY_LIFETIME, playground_key_create
from apps.organizations.models import Role
from apps.prompts.compiled import DEFAULT_LABEL, TemplateSnapshot, VersionSnapshot
from apps.prompts.selectors import template_snapshot, templates_of
from apps.providers.selectors import provider_keys_of
from apps.teams.selectors import team_ids_of, teams_of

# How long the page waits for a log entry: one look a second (the outbox writes within about one).
ENTRY_POLLS = 30


def _own_teams(console: Console):
    return teams_of(console.organization.id).filter(
        pk__in=team_ids_of(user=console.user, organization_id=console.organization.id)
    )


def _header_names() -> dict[str, str]:
    """The proxy's header names the page reads, as the gateway's brand spells them."""
    names = header_names()
    return {
        "requestId": names.request_id,
        "cache": names.cache,
        "cost": names.cost,
        "provider": names.provider,
        "model": names.model,
        "latency": names.latency,
        "ttft": names.ttft,
        "policyAction": names.policy_action,
        "policyReason": names.policy_reason,
        "errorCode": names.error_code,
        "prefix": names.request_id.removesuffix("request-id"),
    }


def _provider_models(organization_id) -> list[str]:
    """``provider/model`` names the proxy routes without an alias, for the providers the organization
    has an enabled key of: a first request needs no alias made first."""
    providers = set(
        provider_keys_of(organization_id).filter(is_active=True).values_list("provider", flat=True)
    )
    return suggested_chat_models(providers)


@console_view()
def playground(request, console: Console):
    return render(
        request,
        "console/playground/page.html",
        {
            "console": console,
            "aliases": model_aliases_of(console.organization.id).filter(is_active=True).order_by("alias"),
            "provider_models": _provider_models(console.organization.id),
            "templates": templates_of(console.organization.id)
            .filter(versions__isnull=False)
            .distinct()
            .order_by("slug"),
            # Making a key is an admin's right, here as on the keys pages and in the API.
            "may_make_key": console.can(Role.ADMIN),
            "teams": _own_teams(console),
            "key_minutes": int(PLAYGROUND_KEY_LIFETIME.total_seconds() // 60),
            "header_names": _header_names(),
        },
    )


@never_cache  # the answer carries the key's only copy
@console_view(role=Role.ADMIN, methods=("POST",))
def playground_key(request, console: Console):
    """A short-lived key for the signed-in person, as JSON for the page's script."""
    try:
        api_key, secret = playground_key_create(
            organization=console.organization, user=console.user, team_id=text(request.POST, "team_id")
        )
    except GatewayError as error:  # in the management API's shape, by its own handler
        refused = management_exception_handler(error, {"request": request, "view": None})
        return JsonResponse(refused.data, status=refused.status_code)
    return JsonResponse(
        {
            "key": secret,
            "name": api_key.name,
            "expires_at": api_key.expires_at.isoformat(),
            "team": api_key.team.name if api_key.team else None,
        },
        status=201,
    )


def _chosen_version(snapshot: TemplateSnapshot, reference: str | None) -> tuple[str, VersionSnapshot | None]:
    """The version a label or number names; by default (or for one the template lacks) the one a
    request naming none gets, ``production``, else the newest."""
    if reference in snapshot.labels:
        return reference, snapshot.versions.get(snapshot.labels[reference])
    if (number := digits(reference, max_digits=9)) in snapshot.versions:
        return reference, snapshot.versions[number]
    if DEFAULT_LABEL in snapshot.labels:
        return DEFAULT_LABEL, snapshot.versions.get(snapshot.labels[DEFAULT_LABEL])
    if snapshot.latest is None:
        return "", None
    return str(snapshot.latest), snapshot.versions[snapshot.latest]


@console_view()
def playground_prompt(request, console: Console):
    """The chosen template's versions (labels first) and the chosen version's variables."""
    template_id = text(request.GET, "prompt_template")
    if template_id is None:
        return render(request, "console/playground/_prompt.html", {"template": None})
    try:
        template = get_object_or_404(templates_of(console.organization.id), pk=uuid.UUID(template_id))
    except ValueError:
        raise Http404("No such template.") from None
    snapshot = template_snapshot(template)
    reference, version = _chosen_version(snapshot, text(request.GET, "prompt_version"))
    labels = [(label, f"{label} (version {number})") for label, number in sorted(snapshot.labels.items())]
    numbers = [(str(number), f"version {number}") for number in sorted(snapshot.versions, reverse=True)]
    return render(
        request,
        "console/playground/_prompt.html",
        {
            "template": template,
            "reference": reference,
            "choices": labels + numbers,
            "variables": [
                {"name": name, "default": version.variable_defaults.get(name)}
                for name in (version.variables if version else ())
            ],
            "default_model": version.defaults.get("model") if version else None,
        },
    )


@console_view()
def playground_entry(request, console: Console, log_id):
    """The request's log entry once the outbox has written it; until then, a look again a second later,
    ``ENTRY_POLLS`` times. Another organization's entry reads as one not recorded."""
    polls = digits(request.GET.get("polls"), max_digits=3) or 0
    return render(
        request,
        "console/playground/_entry.html",
        {
            "entry": entries_of(console.organization.id).filter(pk=log_id).first(),
            "log_id": log_id,
            "next_poll": polls + 1,
            "waiting": polls < ENTRY_POLLS,
        },
    )


urlpatterns = [
    path("playground/", playground, name="playground"),
    path("playground/key", playground_key, name="playground-key"),
    path("playground/prompt", playground_prompt, name="playground-prompt"),
    path("playground/entries/<uuid:log_id>", playground_entry, name="playground-entry"),
]
