from rest_framework.routers import SimpleRouter

from .views import SsoConnectionViewSet

router = SimpleRouter(trailing_slash=False)
router.register("sso/connections", SsoConnectionViewSet, basename="sso-connection")

urlpatterns = router.urls
