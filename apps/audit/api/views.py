from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.response import Response

from apps.audit import selectors
from apps.audit.models import AuditEntry
from apps.core.api.pagination import CursorPagination
from apps.organizations.tenancy import OrganizationScopedViewSet

from .serializers import (
    AnalyticsQuerySerializer,
    AuditEntrySerializer,
    AuditEntrySummarySerializer,
    CacheSerializer,
    GroupedQuerySerializer,
    LogQuerySerializer,
    OverviewSerializer,
    PolicySerializer,
)


class AuditLogPagination(CursorPagination):
    """Newest first on (created_at, id), the order of the ``audit_org_time`` index."""

    ordering = ("-created_at", "-id")


class AuditLogViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The audit log: one entry per proxied request; ``log_id`` is its ``x-gateway-request-id``."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    pagination_class = AuditLogPagination
    lookup_url_kwarg = "log_id"

    @extend_schema(parameters=[LogQuerySerializer], responses=AuditEntrySummarySerializer(many=True))
    def list(self, request):
        query = LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        entries = selectors.log_summaries(
            selectors.entries_matching(self.get_queryset(), **query.validated_data)
        )
        page = self.paginate_queryset(entries)
        return self.get_paginated_response(AuditEntrySummarySerializer(page, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "log_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The x-gateway-request-id."
            )
        ]
    )
    def retrieve(self, request, log_id=None):
        return Response(self.get_serializer(self.get_object()).data)


class AnalyticsViewSet(OrganizationScopedViewSet):
    """Aggregates of the audit log for a range (default: the last 24 hours)."""

    queryset = AuditEntry.objects.all()
    pagination_class = None

    def _query(self, serializer_class) -> dict:
        query = serializer_class(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        return dict(query.validated_data)

    @extend_schema(parameters=[GroupedQuerySerializer], responses=OverviewSerializer)
    def overview(self, request):
        """Spend, requests, tokens, error rate, latency p50/p95 and cache hit rate."""
        query = self._query(GroupedQuerySerializer)
        group_by = query.pop("group_by", None)
        entries = selectors.entries_matching(self.get_queryset(), **query)
        numbers = selectors.usage_overview(entries, group_by=group_by)
        return Response(OverviewSerializer({**query, "group_by": group_by, **numbers}).data)

    @extend_schema(parameters=[GroupedQuerySerializer], responses=CacheSerializer)
    def cache(self, request):
        """Hits per cache tier, misses, bypasses and hit rates."""
        query = self._query(GroupedQuerySerializer)
        group_by = query.pop("group_by", None)
        entries = selectors.entries_matching(self.get_queryset(), **query)
        numbers = selectors.cache_breakdown(entries, group_by=group_by)
        return Response(CacheSerializer({**query, "group_by": group_by, **numbers}).data)

    @extend_schema(parameters=[AnalyticsQuerySerializer], responses=PolicySerializer)
    def policy(self, request):
        """Hit counts per policy and action."""
        query = self._query(AnalyticsQuerySerializer)
        entries = selectors.entries_matching(self.get_queryset(), **query)
        return Response(PolicySerializer({**query, **selectors.policy_hits(entries)}).data)
