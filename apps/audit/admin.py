import json
import uuid

from django.contrib import admin
from django.db.models import Q
from django.utils.html import format_html

from apps.core.admin_mixins import ReadOnlyAdmin
from apps.providers.models import Provider

from .models import AuditEntry
from .selectors import CACHE_VALUES

# What a page of the list never reads: bodies can be large, and a list of them would be slow.
HEAVY_FIELDS = ("request_body", "response_body", "attempts", "policy_decisions")


# The filters offer fixed choices: Django's default (every distinct value) would scan the whole
# table on each page load.
class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"
    _ranges = {"2xx": (200, 300), "4xx": (400, 500), "429": (429, 430), "5xx": (500, 600)}

    def lookups(self, request, model_admin):
        return [(key, key) for key in self._ranges]

    def queryset(self, request, queryset):
        if self.value() in self._ranges:
            low, high = self._ranges[self.value()]
            return queryset.filter(status__gte=low, status__lt=high)
        return queryset


class ProviderFilter(admin.SimpleListFilter):
    title = "provider"
    parameter_name = "provider"

    def lookups(self, request, model_admin):
        return [*Provider.choices, ("-", "none (no upstream)")]

    def queryset(self, request, queryset):
        if self.value() == "-":
            return queryset.filter(provider="")
        if self.value() in Provider.values:
            return queryset.filter(provider=self.value())
        return queryset


class CacheFilter(admin.SimpleListFilter):
    title = "cache"
    parameter_name = "cache"

    def lookups(self, request, model_admin):
        return [(value, value) for value in CACHE_VALUES]

    def queryset(self, request, queryset):
        if self.value() in CACHE_VALUES:
            return queryset.filter(cache=self.value())
        return queryset


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log, read-only: entries are written by the gateway alone and never changed here."""

    list_display = (
        "created_at",
        "status",
        "endpoint",
        "model",
        "provider",
        "cost_usd",
        "latency_ms",
        "organization",
    )
    list_filter = (StatusFilter, ProviderFilter, CacheFilter, "created_at")
    list_select_related = ("organization",)
    date_hierarchy = "created_at"
    search_fields = ("id", "api_key_prefix")  # the look-up itself is get_search_results
    search_help_text = "A request id (x-gateway-request-id), or the start of an API key prefix (sk_live_…)."
    show_full_result_count = False  # no COUNT(*) over the whole log on every page
    readonly_fields = (
        "attempts_display",
        "policy_decisions_display",
        "request_body_display",
        "response_body_display",
    )
    fieldsets = (
        (
            "Request",
            {
                "fields": (
                    "id",
                    "created_at",
                    "organization",
                    "endpoint",
                    "status",
                    "error_type",
                    "error_code",
                    "team_id",
                    "api_key_id",
                    "api_key_prefix",
                    "client_ip",
                    "user_agent",
                )
            },
        ),
        (
            "Routing",
            {"fields": ("requested_model", "model", "provider", "provider_key_id", "attempts_display")},
        ),
        ("Stream", {"fields": ("stream", "stream_completed", "client_disconnected", "ttft_ms")}),
        (
            "Usage and cost",
            {
                "fields": (
                    "input_tokens",
                    "output_tokens",
                    "cached_input_tokens",
                    "reasoning_tokens",
                    "usage_estimated",
                    "cost_usd",
                    "latency_ms",
                    "upstream_ms",
                )
            },
        ),
        (
            "Cache and policy",
            {"fields": ("cache", "policy_action", "policy_reason", "policy_decisions_display")},
        ),
        ("Bodies", {"fields": ("body_mode", "request_body_display", "response_body_display")}),
    )

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "audit_auditentry_changelist":
            queryset = queryset.defer(*HEAVY_FIELDS)
        return queryset

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(id=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(Q(api_key_prefix__startswith=term)), False

    @admin.display(description="Attempts")
    def attempts_display(self, entry: AuditEntry) -> str:
        return _pre(json.dumps(entry.attempts, indent=2))

    @admin.display(description="Policy decisions")
    def policy_decisions_display(self, entry: AuditEntry) -> str:
        return _pre(json.dumps(entry.policy_decisions, indent=2))

    @admin.display(description="Request body")
    def request_body_display(self, entry: AuditEntry) -> str:
        return _pre(entry.request_body)

    @admin.display(description="Response body")
    def response_body_display(self, entry: AuditEntry) -> str:
        return _pre(entry.response_body)


def _pre(text: str) -> str:
    # format_html escapes the text: a body is shown, never rendered.
    return format_html('<pre style="white-space: pre-wrap; margin: 0">{}</pre>', text)
