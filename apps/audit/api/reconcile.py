"""``POST /api/v1/analytics/reconcile``: the aggregates compared with the audit log, and corrected."""

from dataclasses import asdict

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.response import Response

from apps.audit.reconcile import BudgetCountersReport, ReconcileReport, reconcile, retained_since
from apps.audit.rollups import Totals
from apps.audit.time_ranges import InvalidParameter, format_instant
from apps.core.api.fields import StrictBooleanField
from apps.organizations.tenancy import OrganizationScopedViewSet

from .serializers import TimeRangeSerializer


class ReconcileRequestSerializer(TimeRangeSerializer):
    """``from``/``to`` (RFC 3339 or dates, half-open) or ``period``, and ``apply``."""

    range_required = True

    apply = StrictBooleanField(required=False, default=False)


class ReconcileRequestSchema(OpenApiSerializerExtension):
    """States ``time_ranges.parse_range``'s rules between the fields, which a body (unlike a query
    string) can: ``period`` or ``from``, never both; ``to`` only with ``from``. Left to the 400:
    ``from`` before ``to``, and a day the month has."""

    target_class = ReconcileRequestSerializer

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["oneOf"] = [
            {"required": ["period"], "not": {"anyOf": [{"required": ["from"]}, {"required": ["to"]}]}},
            {"required": ["from"], "not": {"required": ["period"]}},
        ]
        return schema


@extend_schema_field({"type": "string", "format": "decimal", "example": "12.5"})
class _MoneyField(serializers.Field):
    """Schema only: a decimal string."""


class ReconcileTotalsSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    errors = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cost_usd = _MoneyField()


class ReconcileDifferenceSerializer(serializers.Serializer):
    team_id = serializers.CharField(allow_null=True)
    api_key_id = serializers.CharField(allow_null=True)
    provider = serializers.CharField(allow_null=True)
    expected = ReconcileTotalsSerializer(help_text="The audit log's.")
    found = ReconcileTotalsSerializer(help_text="The rollups'.")
    cost_difference_usd = _MoneyField()


class ReconcileBudgetCounterSerializer(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["organization", "team", "api_key"])
    scope_id = serializers.CharField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    spent_before_usd = _MoneyField(allow_null=True, help_text="null: the window's spend was not loaded.")
    spent_usd = _MoneyField(help_text="The audit log's spend in the window so far.")


class ReconcileBudgetCountersSerializer(serializers.Serializer):
    rebuilt = ReconcileBudgetCounterSerializer(many=True, help_text="The budget windows whose spend changed.")
    error = serializers.CharField(allow_null=True, help_text="Why they could not be rebuilt (Redis down).")


class ReconcileReportSerializer(serializers.Serializer):
    """The answer (built by ``report_data``; this serializer documents it)."""

    def get_fields(self):
        # "from" is a keyword: the fields are named here rather than as attributes.
        return {
            "from": serializers.DateTimeField(),
            "to": serializers.DateTimeField(),
            "source": serializers.CharField(),
            "compared_with": serializers.CharField(),
            "expected": ReconcileTotalsSerializer(help_text="The audit log's."),
            "found": ReconcileTotalsSerializer(help_text="The rollups'."),
            "differences": ReconcileDifferenceSerializer(many=True),
            "applied": serializers.BooleanField(help_text="The rollups were rebuilt."),
            "budget_counters": ReconcileBudgetCountersSerializer(
                allow_null=True,
                help_text="With apply: the current windows of the budgets set to the audit log's spend; "
                "null on a dry run.",
            ),
        }


def _totals(totals: Totals) -> dict:
    return {**asdict(totals), "cost_usd": f"{totals.cost_usd:f}"}


def report_data(report: ReconcileReport) -> dict:
    return {
        "from": format_instant(report.start),
        "to": format_instant(report.end),
        "source": report.source,
        "compared_with": report.compared_with,
        "expected": _totals(report.expected),
        "found": _totals(report.found),
        "differences": [
            {
                "team_id": difference.team_id or None,
                "api_key_id": difference.api_key_id or None,
                "provider": difference.provider or None,
                "expected": _totals(difference.expected),
                "found": _totals(difference.found),
                "cost_difference_usd": f"{difference.expected.cost_usd - difference.found.cost_usd:f}",
            }
            for difference in report.differences
        ],
        "applied": report.applied,
        "budget_counters": _budget_counters(report.budget_counters),
    }


def _money(value) -> str:
    return f"{value.normalize():f}"


def _budget_counters(report: BudgetCountersReport | None) -> dict | None:
    if report is None:
        return None
    return {
        "rebuilt": [
            {
                "scope": change.scope,
                "scope_id": change.scope_id,
                "period_start": format_instant(change.period_start),
                "period_end": format_instant(change.period_end),
                "spent_before_usd": None
                if change.spent_before_usd is None
                else _money(change.spent_before_usd),
                "spent_usd": _money(change.spent_usd),
            }
            for change in report.rebuilt
        ],
        "error": report.error,
    }


class ReconcileViewSet(OrganizationScopedViewSet):
    """Admins only: a dry run reports, ``apply: true`` also rebuilds the aggregates."""

    serializer_class = ReconcileRequestSerializer

    @extend_schema(request=ReconcileRequestSerializer, responses={200: ReconcileReportSerializer})
    def create(self, request):
        serializer = ReconcileRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        start, end = serializer.validated_data["start"], serializer.validated_data["end"]
        if (end - start).days > 366:
            raise InvalidParameter("to", "Reconcile at most a year at a time.")
        earliest = retained_since(self.organization)
        if start < earliest:
            # Older entries may have been deleted by retention: rebuilding aggregates from what is
            # left would erase spend history instead of correcting it.
            raise InvalidParameter(
                "from",
                f"The audit log keeps {self.organization.log_retention_days} days; reconcile from "
                f"{format_instant(earliest)} at the earliest.",
            )
        report = reconcile(
            organization_id=str(self.organization.pk),
            start=start,
            end=end,
            apply=serializer.validated_data["apply"],
        )
        return Response(report_data(report))
