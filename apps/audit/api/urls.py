"""Every path of the audit app: the log, the analytics, the streamed exports and reconcile.

Exact paths, so that the exports beside them (analytics/policy/export ...) are not shadowed.
"""

from django.urls import path

from . import exports
from .reconcile import ReconcileViewSet
from .views import AnalyticsViewSet, AuditLogViewSet

urlpatterns = [
    path("analytics/logs", AuditLogViewSet.as_view({"get": "list"}), name="analytics-logs"),
    path("analytics/logs/<str:log_id>", AuditLogViewSet.as_view({"get": "retrieve"}), name="analytics-log"),
    path("analytics/overview", AnalyticsViewSet.as_view({"get": "overview"}), name="analytics-overview"),
    path("analytics/cache", AnalyticsViewSet.as_view({"get": "cache"}), name="analytics-cache"),
    path("analytics/policy", AnalyticsViewSet.as_view({"get": "policy"}), name="analytics-policy"),
    path("analytics/compliance/export", exports.compliance_export, name="analytics-compliance-export"),
    path("analytics/policy/export", exports.policy_export, name="analytics-policy-export"),
    path("analytics/reconcile", ReconcileViewSet.as_view({"post": "create"}), name="analytics-reconcile"),
]
