from rest_framework.routers import SimpleRouter

from .views import PolicyViewSet

router = SimpleRouter(trailing_slash=False)
router.register("policies", PolicyViewSet, basename="policy")

urlpatterns = router.urls
