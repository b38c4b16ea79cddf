from rest_framework.routers import SimpleRouter

from .views import WebhookDeliveryViewSet, WebhookViewSet

router = SimpleRouter(trailing_slash=False)
# Before the webhooks: "deliveries" would otherwise be read as a webhook's id.
router.register(
    "organizations/current/webhooks/deliveries", WebhookDeliveryViewSet, basename="webhook-delivery"
)
router.register("organizations/current/webhooks", WebhookViewSet, basename="webhook")

urlpatterns = router.urls
