from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from apps.organizations.models import Role
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.sso import services
from apps.sso.models import SsoConnection

from .serializers import SsoConnectionSerializer, SsoConnectionWriteSerializer


class SsoConnectionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's single sign-on connections (docs/sso.md). Owners only, for every method;
    the growth and enterprise plans only for creating or activating one (403 plan_required)."""

    queryset = SsoConnection.objects.all()
    serializer_class = SsoConnectionSerializer
    read_role = Role.OWNER
    write_role = Role.OWNER
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A domain of another active connection.
    error_statuses = {"create": (409,), "partial_update": (409,)}

    @extend_schema(request=SsoConnectionWriteSerializer, responses={201: SsoConnectionSerializer})
    def create(self, request):
        serializer = SsoConnectionWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        connection = services.sso_connection_create(
            organization=self.organization, **serializer.validated_data
        )
        return Response(SsoConnectionSerializer(connection).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=SsoConnectionWriteSerializer, responses={200: SsoConnectionSerializer})
    def partial_update(self, request, pk=None):
        connection = self.get_object()
        serializer = SsoConnectionWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        connection = services.sso_connection_update(connection=connection, **serializer.validated_data)
        return Response(SsoConnectionSerializer(connection).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.sso_connection_delete(connection=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
