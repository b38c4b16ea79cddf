from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import SsoConnectionViewSet, SsoDomainViewSet, SsoInitiateView

router = SimpleRouter(trailing_slash=False)
router.register("sso/connections", SsoConnectionViewSet, basename="sso-connection")
router.register("sso/domains", SsoDomainViewSet, basename="sso-domain")

urlpatterns = [
    path("auth/sso/initiate", SsoInitiateView.as_view(), name="auth-sso-initiate"),
    *router.urls,
]
