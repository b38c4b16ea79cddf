from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.providers import services
from apps.providers.models import ProviderKey

from .serializers import (
    ProviderKeyCreateSerializer,
    ProviderKeyRotateSerializer,
    ProviderKeySerializer,
    ProviderKeyUpdateSerializer,
)


class ProviderKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """Upstream credentials. Members may list them (secrets are never shown); admins change them."""

    queryset = ProviderKey.objects.all()
    serializer_class = ProviderKeySerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]

    @extend_schema(request=ProviderKeyCreateSerializer, responses={201: ProviderKeySerializer})
    def create(self, request):
        provider_key = services.provider_key_create(organization=self.organization, data=request.data)
        return Response(ProviderKeySerializer(provider_key).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ProviderKeyUpdateSerializer, responses={200: ProviderKeySerializer})
    def partial_update(self, request, pk=None):
        provider_key = services.provider_key_update(provider_key=self.get_object(), data=request.data)
        return Response(ProviderKeySerializer(provider_key).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.provider_key_delete(provider_key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=ProviderKeyRotateSerializer, responses={200: ProviderKeySerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        provider_key = services.provider_key_rotate(provider_key=self.get_object(), data=request.data)
        return Response(ProviderKeySerializer(provider_key).data)
