from django.urls import path

from .views import CachePurgeView

urlpatterns = [
    path("organizations/current/cache/purge", CachePurgeView.as_view(), name="cache-purge"),
]
