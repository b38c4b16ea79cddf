from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.catalog import services
from apps.catalog.models import ModelAlias, ModelPrice
from apps.catalog.pricing import SHIPPED_PRICES
from apps.organizations.tenancy import OrganizationScopedViewSet

from .serializers import ModelAliasSerializer, ModelPriceSerializer, ShippedPriceSerializer


class ModelAliasViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's model catalog: aliases, their deployments and fallbacks."""

    queryset = ModelAlias.objects.prefetch_related("deployments")
    serializer_class = ModelAliasSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # An alias taken; an alias another falls back to cannot be deleted.
    error_statuses = {"create": (409,), "partial_update": (409,), "destroy": (409,)}

    def create(self, request):
        model_alias = services.model_alias_create(organization=self.organization, data=request.data)
        return Response(self.get_serializer(model_alias).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        model_alias = services.model_alias_update(model_alias=self.get_object(), data=request.data)
        return Response(self.get_serializer(self.get_queryset().get(pk=model_alias.pk)).data)

    def destroy(self, request, pk=None):
        services.model_alias_delete(model_alias=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class ModelPriceViewSet(mixins.ListModelMixin, OrganizationScopedViewSet):
    """Dated price versions. A price is changed by adding a version, never by editing one."""

    queryset = ModelPrice.objects.all()
    serializer_class = ModelPriceSerializer
    error_statuses = {"create": (409,)}  # a version with the same effective_from exists

    def create(self, request):
        price = services.model_price_create(organization=self.organization, data=request.data)
        return Response(self.get_serializer(price).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: ShippedPriceSerializer(many=True)})
    @action(detail=False, methods=["get"], pagination_class=None)
    def shipped(self, request):
        """The list prices the gateway ships with, used where the organization set none."""
        rows = [
            {"provider": provider, "model": model, "price": price}
            for (provider, model), versions in SHIPPED_PRICES.items()
            for price in versions
        ]
        return Response(ShippedPriceSerializer(rows, many=True).data)
