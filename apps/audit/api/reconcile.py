"""``POST /api/v1/analytics/reconcile``: the aggregates compared with the audit log, and corrected."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from apps.audit.periods import InvalidParameter, format_instant
from apps.audit.reconcile import ReconcileReport, reconcile, retained_since
from apps.audit.rollups import Totals
from apps.organizations.tenancy import OrganizationScopedViewSet

from .serializers import TimeRangeSerializer


class ReconcileRequestSerializer(TimeRangeSerializer):
    """``from``/``to`` (RFC 3339 or dates, half-open) or ``period``, and ``apply``."""

    range_required = True

    apply = serializers.BooleanField(required=False, default=False)


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
