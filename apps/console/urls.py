from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from .views import keys, session

app_name = "console"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:api-keys"), name="home"),
    path("login/", session.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("organization/", session.switch_organization, name="switch-organization"),
    path("api-keys/", keys.api_key_list, name="api-keys"),
    path("api-keys/new", keys.api_key_create, name="api-key-create"),
    path("api-keys/<uuid:key_id>/", keys.api_key_detail, name="api-key"),
    path("api-keys/<uuid:key_id>/edit", keys.api_key_update, name="api-key-update"),
    path("api-keys/<uuid:key_id>/revoke", keys.api_key_revoke, name="api-key-revoke"),
]
