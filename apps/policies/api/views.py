from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.policies import services
from apps.policies.models import Policy
from apps.policies.selectors import policy_dry_run

from .serializers import DryRunResultSerializer, DryRunSerializer, PolicySerializer


class PolicyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's policies, applied in ``order`` (docs/policies.md). Members read; admins and
    owners write."""

    queryset = Policy.objects.all()
    serializer_class = PolicySerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A name taken.
    error_statuses = {"create": (409,), "partial_update": (409,)}

    def create(self, request):
        policy = services.policy_create(organization=self.organization, data=request.data)
        return Response(self.get_serializer(policy).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        policy = self.get_object()
        services.policy_update(policy=policy, data=request.data)
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.policy_delete(policy=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=DryRunSerializer, responses={200: DryRunResultSerializer})
    @action(detail=False, methods=["post"], url_path="dry-run")
    def dry_run(self, request):
        """What the organization's active policies would do to a sample request: nothing is sent
        anywhere and nothing is recorded."""
        serializer = DryRunSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = policy_dry_run(organization_id=self.organization.pk, **serializer.validated_data)
        return Response(DryRunResultSerializer(result).data)
