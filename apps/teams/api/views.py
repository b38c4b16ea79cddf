from rest_framework import mixins, status
from rest_framework.response import Response

from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.teams import services
from apps.teams.models import Team

from .serializers import TeamSerializer


class TeamViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    queryset = Team.objects.all()
    serializer_class = TeamSerializer
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A slug taken; a team that still has active keys cannot be deleted.
    error_statuses = {"create": (409,), "partial_update": (409,), "destroy": (409,)}

    def create(self, request):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        team = services.team_create(organization=self.organization, **serializer.validated_data)
        return Response(self.get_serializer(team).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        team = self.get_object()
        serializer = self.get_serializer(team, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        team = services.team_update(team=team, **serializer.validated_data)
        return Response(self.get_serializer(team).data)

    def destroy(self, request, pk=None):
        services.team_delete(team=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
