from django.urls import path

from .views import AnalyticsViewSet, AuditLogViewSet

# Exact paths, so that the exports beside them (analytics/policy/export ...) are not shadowed.
urlpatterns = [
    path("analytics/logs", AuditLogViewSet.as_view({"get": "list"}), name="analytics-logs"),
    path("analytics/logs/<str:log_id>", AuditLogViewSet.as_view({"get": "retrieve"}), name="analytics-log"),
    path("analytics/overview", AnalyticsViewSet.as_view({"get": "overview"}), name="analytics-overview"),
    path("analytics/cache", AnalyticsViewSet.as_view({"get": "cache"}), name="analytics-cache"),
    path("analytics/policy", AnalyticsViewSet.as_view({"get": "policy"}), name="analytics-policy"),
]
