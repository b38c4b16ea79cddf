from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.core import views as core_views
from gateway_project import health

# The admin modules register here, when the first request outside /v1/ loads this URLconf, not at
# start-up (SimpleAdminConfig in INSTALLED_APPS): the proxy never loads the admin or DRF.
admin.autodiscover()

api_v1 = [
    path("", include("apps.accounts.api.urls")),
    path("", include("apps.organizations.api.urls")),
    path("", include("apps.organization_settings.api.urls")),
    path("", include("apps.teams.api.urls")),
    path("", include("apps.keys.api.urls")),
    path("", include("apps.providers.api.urls")),
    path("", include("apps.catalog.api.urls")),
    path("", include("apps.audit.api.urls")),
    path("", include("apps.policies.api.urls")),
    path("", include("apps.cache.api.urls")),
    path("", include("apps.webhooks.api.urls")),
    path("", include("apps.prompts.api.urls")),
    path("", include("apps.experiments.api.urls")),
    path("", include("apps.sso.api.urls")),
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path(
        "redoc", SpectacularRedocView.as_view(url_name="schema", template_name="api/redoc.html"), name="redoc"
    ),
    # Anything else under /api/ is a JSON 404, never Django's HTML page.
    re_path(r"^.*$", core_views.api_not_found),
]

urlpatterns = [
    # The address `make run` prints: the console is what a person opens it for.
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    # Browsers ask for /favicon.ico on every page that names no icon (the admin's, the API's docs).
    path("favicon.ico", core_views.favicon),
    path("api/v1/", include(api_v1)),
    re_path(r"^api/.*$", core_views.api_not_found),
    path("admin/", admin.site.urls),
    # The console's sign-in pages served by django-allauth (two-factor, single sign-on's callback).
    path("console/auth/", include("apps.sso.urls")),
    path("console/", include("apps.console.urls")),
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
]

handler400 = "apps.core.views.handler400"
handler404 = "apps.core.views.handler404"
handler500 = "apps.core.views.handler500"
