from rest_framework.routers import SimpleRouter

from .views import ProviderKeyViewSet

router = SimpleRouter(trailing_slash=False)
router.register("provider-keys", ProviderKeyViewSet, basename="provider-key")

urlpatterns = router.urls
