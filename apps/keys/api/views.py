from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from apps.keys import services
from apps.keys.models import ApiKey
from apps.organizations.tenancy import OrganizationScopedViewSet

from .serializers import ApiKeyCreatedSerializer, ApiKeyCreateSerializer, ApiKeySerializer


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """API keys of the caller's organization. Members may list them; admins create and revoke."""

    queryset = ApiKey.objects.all()
    serializer_class = ApiKeySerializer

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request):
        serializer = ApiKeyCreateSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        api_key, secret = services.api_key_create(
            organization=self.organization, created_by=request.user, **serializer.validated_data
        )
        api_key.key = secret
        api_key.warning = services.KEY_WARNING
        return Response(ApiKeyCreatedSerializer(api_key).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.api_key_revoke(api_key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
