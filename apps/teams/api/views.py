import uuid

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.limits.api.serializers import UsageSerializer, attached_limits
from apps.limits.models import Scope
from apps.limits.usage import usage_of
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.teams import selectors, services
from apps.teams.models import Team, TeamMembership

from .serializers import TeamMemberAddSerializer, TeamMemberSerializer, TeamSerializer


def may_read_team_usage(request, team_id) -> bool:
    return selectors.may_read_team_usage(membership=request.auth.membership, team_id=team_id)


class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    queryset = Team.objects.all()
    serializer_class = TeamSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A slug taken; a team that still has active keys cannot be deleted.
    error_statuses = {"create": (409,), "partial_update": (409,), "destroy": (409,)}

    def get_base_queryset(self):
        return self.queryset.select_related("limits")

    def create(self, request):
        team = services.team_create(organization=self.organization, data=request.data)
        return Response(self.get_serializer(team).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        team = self.get_object()
        services.team_update(team=team, data=request.data)
        return Response(self.get_serializer(self.get_object()).data)  # read again: the limits changed

    def destroy(self, request, pk=None):
        services.team_delete(team=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: UsageSerializer})
    @action(detail=True, methods=["get"])
    def usage(self, request, pk=None):
        """The team's spend in its budget's current window (the current UTC month without a budget).
        A member reads only the teams they belong to: any other answers 404."""
        team = self.get_object()
        if not may_read_team_usage(request, team.id):
            raise Http404
        usage = usage_of(
            organization=self.organization,
            scope=Scope.TEAM,
            scope_id=team.id,
            limits=attached_limits(team),
            now=timezone.now(),
        )
        return Response(UsageSerializer(usage).data)


TEAM_ID = OpenApiParameter("team_id", str, OpenApiParameter.PATH, description="The team's id.")
USER_ID = OpenApiParameter("user_id", str, OpenApiParameter.PATH, description="The member's user id.")


@extend_schema(parameters=[TEAM_ID])
class TeamMemberViewSet(mixins.ListModelMixin, OrganizationScopedViewSet):
    """The users of the organization who belong to a team. Members read; admins add and remove."""

    queryset = TeamMembership.objects.all()
    serializer_class = TeamMemberSerializer
    organization_field = "team__organization_id"
    lookup_field = "user_id"
    http_method_names = ["get", "post", "delete", "options"]
    # Already a member of the team.
    error_statuses = {"create": (409,)}

    def team(self) -> Team:
        try:
            team_id = uuid.UUID(self.kwargs["team_id"])
        except ValueError:
            raise Http404 from None
        return get_object_or_404(Team, pk=team_id, organization=self.organization)

    def get_base_queryset(self):
        return selectors.team_members(self.team())

    @extend_schema(request=TeamMemberAddSerializer, responses={201: TeamMemberSerializer})
    def create(self, request, team_id=None):
        team = self.team()
        membership = services.team_member_add(team=team, data=request.data)
        return Response(TeamMemberSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[USER_ID], responses={204: None})
    def destroy(self, request, team_id=None, user_id=None):
        team = self.team()
        try:
            user_id = uuid.UUID(user_id)
        except ValueError:
            raise Http404 from None
        services.team_member_remove(membership=get_object_or_404(TeamMembership, team=team, user_id=user_id))
        return Response(status=status.HTTP_204_NO_CONTENT)
