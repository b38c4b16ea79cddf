from django.urls import path

from .reconcile import ReconcileViewSet

urlpatterns = [
    path("analytics/reconcile", ReconcileViewSet.as_view({"post": "create"}), name="analytics-reconcile"),
]
