"""Invitations, both sides (docs/management-api.md, "Invitations").

An owner invites an address to the organization of the session (``/organizations/current/invitations``:
list, create, read, revoke); nobody becomes a member until the account with that address accepts.
The invited account lists the invitations to its own address and accepts or declines them
(``/invitations``), with a session of any organization it belongs to; an account that belongs to none
yet uses the console (``/console/invitations/``) or the accept link. Only an account whose address is
verified answers by id (``services._check_invitee``).
"""

import uuid

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.organizations import selectors, services
from apps.organizations.inputs import InvitationInputSerializer
from apps.organizations.models import Invitation, Role
from apps.organizations.tenancy import OrganizationScopedViewSet


def accept_url(request, token: str) -> str:
    return request.build_absolute_uri(f"/console/invitations/{token}/")


class InvitationSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()
    invited_by = serializers.SerializerMethodField()

    class Meta:
        model = Invitation
        fields = ("id", "email", "role", "status", "invited_by", "expires_at", "closed_at", "created_at")

    def get_status(self, invitation) -> str:
        return invitation.current_status(self.context["now"])

    def get_invited_by(self, invitation) -> str | None:
        return invitation.invited_by.email if invitation.invited_by else None


class CreatedInvitationSerializer(InvitationSerializer):
    accept_url = serializers.SerializerMethodField(
        help_text="The link the invited person opens to accept; shown once, never again."
    )

    class Meta(InvitationSerializer.Meta):
        fields = (*InvitationSerializer.Meta.fields, "accept_url")

    def get_accept_url(self, invitation) -> str:
        return accept_url(self.context["request"], self.context["token"])


class InvitationCreateSerializer(InvitationInputSerializer):
    pass


class _OrganizationRef(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()


class ReceivedInvitationSerializer(serializers.ModelSerializer):
    organization = _OrganizationRef()

    class Meta:
        model = Invitation
        fields = ("id", "organization", "role", "expires_at", "created_at")


class MembershipSerializer(serializers.Serializer):
    organization = _OrganizationRef()
    role = serializers.CharField()


class OrganizationInvitationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet
):
    """The organization's invitations; owners only (they alone add members)."""

    queryset = Invitation.objects.all()
    serializer_class = InvitationSerializer
    read_role = Role.OWNER
    write_role = Role.OWNER
    http_method_names = ["get", "post", "delete", "options"]
    # Already a member, or a pending invitation to the address; revoking an answered one.
    error_statuses = {"create": (409,), "destroy": (409,)}

    def get_base_queryset(self):
        return selectors.invitations_of(self.organization.pk)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    @extend_schema(request=InvitationCreateSerializer, responses={201: CreatedInvitationSerializer})
    def create(self, request):
        invitation, token = services.invitation_create(
            organization=self.organization, data=request.data, invited_by=request.user
        )
        context = {**self.get_serializer_context(), "token": token}
        return Response(
            CreatedInvitationSerializer(invitation, context=context).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        """Revokes a pending invitation; it stays listed as revoked."""
        services.invitation_revoke(invitation=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class ReceivedInvitationViewSet(viewsets.GenericViewSet, mixins.ListModelMixin):
    """The invitations to the signed-in account's own address that it can still answer, of any
    organization. Another account's invitation answers 404. An account made through an invitation link
    (its address unverified) lists none and answers 404 for every id: it answers through each
    invitation's own link, in the console."""

    serializer_class = ReceivedInvitationSerializer
    permission_classes = [IsAuthenticated]
    pagination_class = None
    error_statuses = {"accept": (404, 409), "decline": (404, 409)}

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's look at the view: no user
            return Invitation.objects.none()
        return selectors.invitations_for(self.request.user)

    def _invitation(self, pk) -> Invitation:
        try:
            pk = uuid.UUID(str(pk))
        except ValueError:
            raise Http404 from None  # not an id: as an id that does not exist
        return get_object_or_404(self.get_queryset(), pk=pk)

    @extend_schema(request=None, responses={200: MembershipSerializer})
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        """Joins the organization with the invited role."""
        membership = services.invitation_accept(invitation=self._invitation(pk), user=request.user)
        return Response(
            {
                "organization": {"id": membership.organization_id, "name": membership.organization.name},
                "role": membership.role,
            }
        )

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def decline(self, request, pk=None):
        services.invitation_decline(invitation=self._invitation(pk), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
