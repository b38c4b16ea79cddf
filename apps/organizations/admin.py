"""Members and invitations. The organization's own page shows its budget and rate limits too, so it is
registered above the apps it composes (apps/organization_settings/admin.py)."""

from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ServiceAdmin
from apps.core.errors import PermissionDenied

from . import services
from .models import Invitation, InvitationStatus, Membership


@admin.register(Membership)
class MembershipAdmin(ServiceAdmin):
    """Through the membership services, as the console: the organization's last owner cannot be
    demoted or removed, and a removed member leaves the organization's teams too. Nobody is added
    here: an account joins an organization by accepting an invitation (below), never without its
    consent."""

    list_display = ("user", "organization", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("user__email", "organization__name")
    readonly_fields = ("user", "organization")  # only the role changes

    def has_add_permission(self, request) -> bool:
        return False

    def service_create(self, request, form) -> Membership:  # pragma: no cover (no add page)
        raise PermissionDenied("Members join by accepting an invitation.")

    def service_update(self, request, obj: Membership, form, changes: dict) -> None:
        if "role" in changes:
            services.membership_change_role(membership=obj, data=changes)

    def service_delete(self, request, obj: Membership) -> None:
        services.membership_remove(membership=obj)


# The invitation's fields, as the service takes them (inputs.py), which checks them (a member
# already, or a pending invitation, is its refusal on the page).
FIELDS = ("email", "role")


class InvitationForm(forms.ModelForm):
    class Meta:
        model = Invitation
        fields = ("organization", *FIELDS)


@admin.register(Invitation)
class InvitationAdmin(ServiceAdmin):
    """Staff invite as an owner does, through the same service; the accept link is shown once, in the
    message after saving. Revoking is the action; an invitation is never changed or deleted."""

    form = InvitationForm
    list_display = ("email", "organization", "role", "status", "expires_at", "created_at")
    list_filter = ("status", "role")
    search_fields = ("email", "organization__name")
    autocomplete_fields = ("organization",)
    actions = ("revoke",)

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return ("organization", "email", "role", "status", "invited_by", "expires_at", "closed_at")
        return ()

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def service_create(self, request, form) -> Invitation:
        invitation, token = services.invitation_create(
            organization=form.cleaned_data["organization"],
            data={name: form.cleaned_data[name] for name in FIELDS},
            invited_by=request.user,
        )
        link = request.build_absolute_uri(f"/console/invitations/{token}/")
        self.message_user(request, f"Give {invitation.email} this link to accept (shown once): {link}")
        return invitation

    def service_update(self, request, obj: Invitation, form, changes: dict) -> None:
        pass  # every field is read only once it exists

    def service_delete(self, request, obj: Invitation) -> None:  # pragma: no cover (no delete)
        raise PermissionDenied("Revoke an invitation instead.")

    @admin.action(description="Revoke the selected pending invitations", permissions=["change"])
    def revoke(self, request, queryset) -> None:
        for invitation in queryset.filter(status=InvitationStatus.PENDING):
            services.invitation_revoke(invitation=invitation)
        self.message_user(request, "Revoked the pending invitations selected.")
