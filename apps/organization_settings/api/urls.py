from django.urls import path

from .views import CurrentOrganizationView

urlpatterns = [
    path("organizations/current", CurrentOrganizationView.as_view(), name="organization-current"),
]
