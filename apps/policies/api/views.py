import uuid

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.keys.models import ApiKey
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.policies import services
from apps.policies.engine import CHAT, EMBEDDINGS, PolicyEngine
from apps.policies.models import Policy
from apps.policies.selectors import active_policy_snapshots
from apps.teams.models import Team

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
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        policy = services.policy_create(organization=self.organization, **serializer.service_values())
        return Response(self.get_serializer(policy).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        policy = self.get_object()
        serializer = self.get_serializer(policy, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        services.policy_update(policy=policy, **serializer.service_values())
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
        sample = serializer.validated_data
        team_id = self._team_id(sample.get("team"))
        api_key_id = self._api_key_id(sample.get("api_key"))
        engine = PolicyEngine.build(active_policy_snapshots(self.organization.pk))
        endpoint = CHAT if "messages" in sample else EMBEDDINGS
        field = "messages" if endpoint == CHAT else "input"
        context = {"model": sample["model"], "team_id": team_id, "api_key_id": api_key_id}
        verdict = engine.check_request({field: sample[field]}, endpoint=endpoint, **context)
        result = {
            "action": verdict.action,
            "reason": verdict.reason,
            "blocked": verdict.blocked is not None,
            "decisions": [decision.as_record() for decision in verdict.decisions],
            field: verdict.body[field],
            "redacts_response": engine.response_redactor(**context) is not None,
        }
        return Response(DryRunResultSerializer(result).data)

    def _team_id(self, value: str | None) -> str | None:
        if value is None:
            return None
        teams = Team.objects.filter(organization=self.organization)
        match = Q(slug=value)
        try:
            match |= Q(id=uuid.UUID(value))
        except ValueError:
            pass
        team = teams.filter(match).first()
        if team is None:
            raise _unknown("team", "No such team in this organization.")
        return str(team.id)

    def _api_key_id(self, value) -> str:
        if value is None:
            return ""
        if not ApiKey.objects.filter(organization=self.organization, id=value).exists():
            raise _unknown("api_key", "No such API key in this organization.")
        return str(value)


def _unknown(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(message, code="validation_error", param=field, fields={field: [message]})
