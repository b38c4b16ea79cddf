from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.keys import services
from apps.keys.models import ApiKey
from apps.limits.api.serializers import UsageSerializer, attached_limits
from apps.limits.models import Scope
from apps.limits.usage import Usage, usage_of
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.teams.api.views import may_read_team_usage

from .serializers import (
    ApiKeyCreatedSerializer,
    ApiKeyCreateSerializer,
    ApiKeyDetailSerializer,
    ApiKeySerializer,
    ApiKeyUpdateSerializer,
)


class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """API keys of the caller's organization. Members may list them; admins create, change and
    revoke. A key's usage is read by admins, and by the members of the team the key is bound to."""

    queryset = ApiKey.objects.all()
    serializer_class = ApiKeySerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]

    def get_base_queryset(self):
        return self.queryset.select_related("limits")

    def _usage(self, api_key: ApiKey) -> Usage | None:
        if not may_read_team_usage(self.request, api_key.team_id):
            return None
        return usage_of(
            organization=self.organization,
            scope=Scope.API_KEY,
            scope_id=api_key.id,
            limits=attached_limits(api_key),
            now=timezone.now(),
        )

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request):
        api_key, secret = services.api_key_create(
            organization=self.organization, created_by=request.user, data=request.data
        )
        api_key.key = secret
        api_key.warning = services.KEY_WARNING
        return Response(ApiKeyCreatedSerializer(api_key).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: ApiKeyDetailSerializer})
    def retrieve(self, request, pk=None):
        api_key = self.get_object()
        api_key.usage = self._usage(api_key)
        return Response(ApiKeyDetailSerializer(api_key).data)

    @extend_schema(request=ApiKeyUpdateSerializer, responses={200: ApiKeyDetailSerializer})
    def partial_update(self, request, pk=None):
        api_key = self.get_object()
        services.api_key_update(api_key=api_key, data=request.data)
        api_key = self.get_object()  # read again: the limits changed
        api_key.usage = self._usage(api_key)
        return Response(ApiKeyDetailSerializer(api_key).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.api_key_revoke(api_key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: UsageSerializer})
    @action(detail=True, methods=["get"])
    def usage(self, request, pk=None):
        """The key's spend in its budget's current window (the current UTC month without a budget).
        A member reads only the keys bound to a team they belong to: any other answers 404."""
        usage = self._usage(self.get_object())
        if usage is None:
            raise Http404
        return Response(UsageSerializer(usage).data)
