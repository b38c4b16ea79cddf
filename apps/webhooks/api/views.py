from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.api.pagination import CursorPagination
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.webhooks import selectors, services
from apps.webhooks.models import Webhook, WebhookDelivery

from .serializers import (
    DeliveryQuerySerializer,
    DeliverySerializer,
    WebhookCreateSerializer,
    WebhookSerializer,
    WebhookUpdateSerializer,
    WebhookWithSecretSerializer,
)


def _with_secret(webhook: Webhook, secret: str) -> dict:
    webhook.secret = secret
    return WebhookWithSecretSerializer(webhook).data


class WebhookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's webhooks (docs/webhooks.md). Members read; admins and owners write. The
    secret is shown at creation and after a roll, never again."""

    queryset = Webhook.objects.all()
    serializer_class = WebhookSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A test of a disabled webhook.
    error_statuses = {"test": (409,)}

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookWithSecretSerializer})
    def create(self, request):
        webhook, secret = services.webhook_create(organization=self.organization, data=request.data)
        return Response(_with_secret(webhook, secret), status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookUpdateSerializer, responses={200: WebhookSerializer})
    def partial_update(self, request, pk=None):
        webhook = self.get_object()
        services.webhook_update(webhook=webhook, data=request.data)
        return Response(WebhookSerializer(webhook).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.webhook_delete(webhook=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Sends a ``webhook.test`` event to this webhook alone; the answer is its delivery."""
        delivery = services.webhook_test(webhook=self.get_object())
        delivery.refresh_from_db()  # sent already when the worker was quick (and in eager mode)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: WebhookWithSecretSerializer})
    @action(detail=True, methods=["post"], url_path="roll-secret")
    def roll_secret(self, request, pk=None):
        """A new secret, shown once; the previous one keeps signing beside it for 24 hours."""
        webhook, secret = services.webhook_roll_secret(webhook=self.get_object())
        return Response(_with_secret(webhook, secret))


class DeliveryPagination(CursorPagination):
    ordering = ("-created_at", "-id")


DELIVERY_ID = OpenApiParameter(
    "delivery_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The delivery's id."
)


class WebhookDeliveryViewSet(mixins.ListModelMixin, OrganizationScopedViewSet):
    """Delivery history: one record per attempt, newest first. Members read; admins and owners retry."""

    queryset = WebhookDelivery.objects.all()
    serializer_class = DeliverySerializer
    pagination_class = DeliveryPagination
    lookup_url_kwarg = "delivery_id"
    http_method_names = ["get", "post", "options"]
    # The event was already delivered, an attempt is under way, or the webhook is disabled.
    error_statuses = {"retry": (409,)}

    @extend_schema(parameters=[DeliveryQuerySerializer])
    def list(self, request):
        query = DeliveryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        deliveries = selectors.deliveries_matching(self.get_queryset(), **query.validated_data)
        page = self.paginate_queryset(deliveries)
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)

    @extend_schema(parameters=[DELIVERY_ID], request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def retry(self, request, delivery_id=None):
        """A new attempt of this delivery's event, sent now. 409 when the event was already
        delivered to the webhook, or an attempt is under way."""
        retry = services.delivery_retry(delivery=self.get_object())
        retry.refresh_from_db()
        return Response(DeliverySerializer(retry).data, status=status.HTTP_202_ACCEPTED)
