"""``POST /api/v1/analytics/reconcile``: the aggregates compared with the audit log, and corrected."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.audit.periods import InvalidParameter, format_instant, parse_range
from apps.audit.reconcile import ReconcileReport, reconcile, retained_since
from apps.audit.rollups import Totals
from apps.core.api.fields import StrictCharField
from apps.core.api.tenancy import OrganizationScopedViewSet


class ReconcileRequestSerializer(serializers.Serializer):
    """``from``/``to`` (RFC 3339 or dates, half-open) or ``period``, and ``apply``."""

    def get_fields(self):
        # "from" is a Python keyword, so the fields are declared here rather than as attributes.
        return {
            "from": StrictCharField(required=False),
            "to": StrictCharField(required=False),
            "period": StrictCharField(required=False),
            "apply": serializers.BooleanField(required=False, default=False),
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
    }


class ReconcileViewSet(OrganizationScopedViewSet):
    """Admins only: a dry run reports, ``apply: true`` also rebuilds the aggregates."""

    serializer_class = ReconcileRequestSerializer

    @extend_schema(request=ReconcileRequestSerializer, responses={200: dict})
    def create(self, request):
        serializer = ReconcileRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        params = {
            name: serializer.validated_data[name]
            for name in ("from", "to", "period")
            if name in serializer.validated_data
        }
        time_range = parse_range(params)
        if (time_range.end - time_range.start).days > 366:
            raise InvalidParameter("to", "Reconcile at most a year at a time.")
        earliest = retained_since(self.organization)
        if time_range.start < earliest:
            # Older entries may have been deleted by retention: rebuilding aggregates from what is
            # left would erase spend history instead of correcting it.
            raise InvalidParameter(
                "from",
                f"The audit log keeps {self.organization.log_retention_days} days; reconcile from "
                f"{format_instant(earliest)} at the earliest.",
            )
        report = reconcile(
            organization_id=str(self.organization.pk),
            start=time_range.start,
            end=time_range.end,
            apply=serializer.validated_data["apply"],
        )
        return Response(report_data(report))
