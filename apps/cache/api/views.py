from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response

from apps.cache import services
from apps.core.api.schema import ErrorSerializer
from apps.organizations.models import Organization
from apps.organizations.tenancy import OrganizationScopedMixin

from .serializers import CachePurgeSerializer


class CachePurgeView(OrganizationScopedMixin, generics.GenericAPIView):
    """Empties the organization's response cache, every tier, in every process. Admins and owners."""

    queryset = Organization.objects.all()
    serializer_class = CachePurgeSerializer
    organization_field = "id"
    http_method_names = ["post", "options"]

    @extend_schema(
        request=None,
        responses={
            202: CachePurgeSerializer,
            503: OpenApiResponse(
                ErrorSerializer, description="Redis is configured but cannot be reached: nothing was purged."
            ),
        },
    )
    def post(self, request):
        services.cache_purge(organization=self.organization)
        return Response({"purged": True}, status=status.HTTP_202_ACCEPTED)
