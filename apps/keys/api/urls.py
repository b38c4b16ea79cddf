from rest_framework.routers import SimpleRouter

from .views import ApiKeyViewSet

router = SimpleRouter(trailing_slash=False)
router.register("api-keys", ApiKeyViewSet, basename="api-key")

urlpatterns = router.urls
