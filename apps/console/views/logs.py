"""Logs: the audit log browser, one entry's page, and its exports.

The list takes every filter of ``GET /api/v1/analytics/logs``, read by the API's own
``LogQuerySerializer`` (a bad one answers 400 with the API's message) and its cursor pagination;
an entry's page shows what ``GET /api/v1/analytics/logs/{log_id}`` answers (``AuditEntrySerializer``:
bodies only as the organization keeps them). The exports stream the compliance export
(``apps.audit.exports``) of the entries the current filters select, as CSV or JSON Lines; like the
API's export, they are for admins and owners (every entry of a range at once is bulk extraction,
while a member reads the log entry by entry).
"""

from datetime import timedelta
from decimal import Decimal

from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.utils import timezone
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.request import Request

from apps.audit import exports, selectors
from apps.audit.api.exports import COMPLIANCE_EXPORT_ROLE, attachment
from apps.audit.api.serializers import AuditEntrySerializer, LogQuerySerializer
from apps.audit.api.views import AuditLogPagination
from apps.audit.time_ranges import TimeRange
from apps.console.access import Console, console_view
from apps.console.forms import relative_link
from apps.core.api.exceptions import management_exception_handler
from apps.core.brand import header_names
from apps.keys.selectors import api_keys_of
from apps.providers.models import Provider
from apps.teams.selectors import teams_of

# The list's filters, as the API names its query parameters.
FILTERS = (
    "period",
    "from",
    "to",
    "team",
    "api_key",
    "model",
    "provider",
    "prompt",
    "status",
    "policy_action",
    "cache",
    "request_id",
    "limit",
)
# Those the form folds away until one is used.
MORE_FILTERS = ("from", "to", "provider", "prompt", "policy_action", "cache", "request_id", "limit")
# Those an export narrows by besides the range and the team (named in the export's header).
_EXPORT_MATCHING = (
    "api_key",
    "model",
    "provider",
    "prompt",
    "status",
    "policy_action",
    "cache",
    "request_id",
)


def api_error(exc: APIException) -> dict:
    """``{"message", "fields"}`` exactly as the management API answers ``exc``."""
    error = management_exception_handler(exc, {"request": None, "view": None}).data["error"]
    return {"message": error["message"], "code": error["code"], "fields": error.get("fields") or {}}


def _filters_context(console: Console, request) -> dict:
    organization_id = console.organization.id
    given = {name: request.GET.get(name, "") for name in FILTERS}
    teams, api_keys = teams_of(organization_id), api_keys_of(organization_id).order_by("name")
    return {
        "console": console,
        "filters": given,
        "filtered": any(value for name, value in given.items() if name != "limit"),
        "more_filtered": any(given[name] for name in MORE_FILTERS),
        "teams": teams,
        "api_keys": api_keys,
        # A filter by an id that names none of the organization's teams or keys (deleted, mistyped,
        # another organization's) matches nothing; the form still shows it.
        "unknown_team": given["team"] and given["team"] not in {str(team.id) for team in teams},
        "unknown_api_key": given["api_key"] and given["api_key"] not in {str(key.id) for key in api_keys},
        "providers": Provider.values,
        "statuses": ("2xx", "4xx", "5xx", "error"),
        "policy_actions": selectors.POLICY_ACTIONS,
        "cache_values": selectors.CACHE_VALUES,
        "periods": (
            ("24h", "Last 24 hours"),
            ("7d", "Last 7 days"),
            ("30d", "Last 30 days"),
            ("mtd", "This month"),
        ),
        "can_export": console.can(COMPLIANCE_EXPORT_ROLE),
    }


def _refused(request, context: dict, exc: APIException):
    error = api_error(exc)
    return render(
        request,
        "console/logs/list.html",
        {**context, "error": error, "entries": [], "bad_filter": True},
        status=exc.status_code,
    )


def _without_empty_fields(request):
    """The filter form sends every field, the empty ones too; the API reads an empty value as a bad one
    (``limit=``). A redirect to the same filters without them keeps the address short and shareable."""
    if all(request.GET.getlist(name) and all(request.GET.getlist(name)) for name in request.GET):
        return None
    params = request.GET.copy()
    for name in list(params):
        kept = [value for value in params.getlist(name) if value]
        if kept:
            params.setlist(name, kept)
        else:
            del params[name]
    return redirect(f"{request.path}?{params.urlencode()}" if params else request.path)


@console_view()
def log_list(request, console: Console):
    if (cleaned := _without_empty_fields(request)) is not None:
        return cleaned
    context = _filters_context(console, request)
    query = LogQuerySerializer(data=request.GET)
    if not query.is_valid():
        return _refused(request, context, ValidationError(query.errors))
    entries = selectors.log_summaries(
        selectors.entries_matching(selectors.entries_of(console.organization.id), **query.validated_data)
    )
    paginator = AuditLogPagination()
    try:
        page = paginator.paginate_queryset(entries, Request(request))
    except (ValidationError, NotFound) as exc:  # a bad limit (400); a tampered cursor (404)
        return _refused(request, context, exc)
    return render(
        request,
        "console/logs/list.html",
        {
            **context,
            "entries": rows_with_names(page, teams=context["teams"], api_keys=context["api_keys"]),
            "next": relative_link(paginator.get_next_link()),
            "previous": relative_link(paginator.get_previous_link()),
            "export_parameters": _export_parameters(request),
        },
    )


def rows_with_names(entries, *, teams, api_keys) -> list[tuple]:
    """Each entry with its team's and its key's names (None for one deleted since)."""
    team_names = {team.id: team.name for team in teams}
    key_names = {key.id: key.name for key in api_keys}
    return [(entry, team_names.get(entry.team_id), key_names.get(entry.api_key_id)) for entry in entries]


def _export_parameters(request) -> str:
    """The current filters as a query string for the export links (not the page's cursor or size)."""
    params = request.GET.copy()
    for name in ("cursor", "limit", "export_format"):
        params.pop(name, None)
    return params.urlencode()


def _gateway_headers(entry: dict) -> list[tuple[str, str]]:
    """The ``x-gateway-*`` headers whose values the entry records (the proxy sends ``-cost-usd`` on
    answers that were not streamed, ``-ttft-ms`` on streams, the provider and model when an upstream
    was chosen, the policy pair when a policy acted). Not the latency, overhead, ``Cache-Status`` or
    rate-limit headers: their values at the time of the answer are not kept (the entry's latency is
    the whole request's, shown with the timings)."""
    names = header_names()
    headers = [(names.request_id, str(entry["log_id"])), (names.cache, entry["cache"])]
    if entry["provider"]:
        headers += [(names.provider, entry["provider"]), (names.model, entry["model"])]
    if entry["stream"]:
        if entry["ttft_ms"] is not None:
            headers.append((names.ttft, f"{entry['ttft_ms']:.2f}"))
    else:
        headers.append((names.cost, entry["cost_usd"]))
    if entry["policy_action"]:
        headers += [
            (names.policy_action, entry["policy_action"]),
            (names.policy_reason, entry["policy_reason"]),
        ]
    if entry["experiment_id"]:
        headers += [
            (names.experiment, str(entry["experiment_id"])),
            (names.variant, entry["experiment_variant"]),
        ]
    return headers


@console_view()
def log_detail(request, console: Console, log_id):
    entry = get_object_or_404(selectors.entries_of(console.organization.id), pk=log_id)
    data = AuditEntrySerializer(entry).data
    team = teams_of(console.organization.id).filter(pk=entry.team_id).first() if entry.team_id else None
    api_key = (
        api_keys_of(console.organization.id).filter(pk=entry.api_key_id).first() if entry.api_key_id else None
    )
    return render(
        request,
        "console/logs/detail.html",
        {
            "console": console,
            "entry": data,
            "team": team,
            "api_key": api_key,
            "headers": _gateway_headers(data),
            "saved": Decimal(data["cache_savings_usd"]) > 0,
        },
    )


@console_view(role=COMPLIANCE_EXPORT_ROLE)
def log_export(request, console: Console, export_format: str):
    """The compliance export of the entries the log's filters select; without a range, everything
    the organization keeps (its retention)."""
    query = LogQuerySerializer(data=request.GET)
    if not query.is_valid():
        return _refused(request, _filters_context(console, request), ValidationError(query.errors))
    matching = dict(query.validated_data)
    now = timezone.now()
    start, end = matching.pop("start"), matching.pop("end")
    if start is None:
        start, end = now - timedelta(days=console.organization.log_retention_days), now
    period = request.GET.get("period") or None
    team_id = matching.pop("team_id", None)
    team_name = None
    if team_id is not None:
        team_name = (
            teams_of(console.organization.id).filter(pk=team_id).values_list("name", flat=True).first()
        )
    export_query = exports.ExportQuery(
        organization=console.organization,
        range=TimeRange(start=start, end=end, period=period),
        export_format=export_format,
        generated_at=now,
        team_id=team_id,
        team_name=team_name,
        matching=matching,
        matching_parameters={name: request.GET[name] for name in _EXPORT_MATCHING if request.GET.get(name)},
    )
    return attachment(export_query, "compliance", exports.compliance_export(export_query))


urlpatterns = [
    path("logs/", log_list, name="logs"),
    path("logs/export.csv", log_export, {"export_format": "csv"}, name="logs-export-csv"),
    path("logs/export.jsonl", log_export, {"export_format": "jsonl"}, name="logs-export-jsonl"),
    path("logs/<uuid:log_id>/", log_detail, name="logs-entry"),
]
