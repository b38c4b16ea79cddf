from rest_framework.routers import SimpleRouter

from .views import ModelAliasViewSet, ModelPriceViewSet

router = SimpleRouter(trailing_slash=False)
router.register("models", ModelAliasViewSet, basename="model-alias")
router.register("model-prices", ModelPriceViewSet, basename="model-price")

urlpatterns = router.urls
