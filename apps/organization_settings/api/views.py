"""``/api/v1/organizations/current``: the organization of the session, with its settings of every
domain (serializers.py); a change goes through ``organization_settings_update`` (services.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics
from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.limits.api.serializers import nested_under
from apps.organization_settings import services
from apps.organizations.models import Organization
from apps.organizations.tenancy import OrganizationScopedMixin

from .serializers import OrganizationSerializer


class CurrentOrganizationView(OrganizationScopedMixin, generics.GenericAPIView):
    """The organization of the current session. Members read it; admins change name and settings."""

    queryset = Organization.objects.all()
    serializer_class = OrganizationSerializer
    organization_field = "id"
    http_method_names = ["get", "patch", "options"]

    def get_object(self) -> Organization:
        return self.get_queryset().get()

    def get(self, request):
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(request=OrganizationSerializer)
    def patch(self, request):
        organization = self.get_object()
        serializer = self.get_serializer(organization, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        try:
            # budget, rate_limits and default_price are the service's own parameters; absent, UNSET.
            services.organization_settings_update(organization=organization, **serializer.validated_data)
        except InvalidRequest as error:
            raise nested_under("settings", error) from error
        return Response(self.get_serializer(self.get_object()).data)  # read again: the limits changed
