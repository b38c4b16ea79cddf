from django import forms
from django.contrib import admin

from apps.accounts.models import User
from apps.core.admin_mixins import DataRegionsField, ModelPatternsField, ServiceAdmin
from apps.core.errors import PermissionDenied
from apps.limits.admin import limits_summary
from apps.limits.selectors import limits_of

from . import services
from .models import Invitation, InvitationStatus, Membership, Organization


class MembershipInline(admin.TabularInline):
    """The organization's members, read only: members are added, changed and removed through the
    membership services (the Membership admin below, the console), which keep the last owner."""

    model = Membership
    extra = 0
    fields = readonly_fields = ("user", "role", "created_at")
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class OrganizationForm(forms.ModelForm):
    """The API's rules for the settings; the slug is made from the name when the organization is
    created, as the API does."""

    log_retention_days = forms.IntegerField(min_value=1, max_value=3650, initial=30)
    allowed_data_regions = DataRegionsField()
    allowed_models = ModelPatternsField()

    class Meta:
        model = Organization
        fields = (
            "name",
            "slug",
            "plan",
            "log_bodies",
            "log_retention_days",
            "allowed_data_regions",
            "allowed_models",
            "limits_fail_mode",
        )


class OrganizationAddForm(OrganizationForm):
    owner = forms.ModelChoiceField(User.objects.all(), help_text="Becomes the organization's owner.")

    class Meta(OrganizationForm.Meta):
        fields = (
            "name",
            "owner",
            "plan",
            "log_bodies",
            "log_retention_days",
            "allowed_data_regions",
            "allowed_models",
        )


@admin.register(Organization)
class OrganizationAdmin(ServiceAdmin):
    """Writes go through the services: a change of the allowed regions or body logging reaches
    every proxy worker on its next request, and a deleted organization's keys stop at once."""

    form = OrganizationForm
    list_display = ("name", "slug", "plan", "log_bodies", "log_retention_days", "created_at")
    list_filter = ("plan", "log_bodies")
    search_fields = ("name", "slug")
    readonly_fields = ("id", "created_at", "updated_at", "budget_and_rate_limits")
    inlines = (MembershipInline,)

    @admin.display(description="Budget and rate limits")
    def budget_and_rate_limits(self, obj: Organization) -> str:
        if obj.pk is None:
            return "Set once the organization exists."
        return limits_summary(limits_of(organization=obj), organization=obj.pk)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = OrganizationAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_inlines(self, request, obj):
        # The owner is chosen on the add page; further members once the organization exists.
        return self.inlines if obj is not None else ()

    def service_create(self, request, form) -> Organization:
        settings = {name: form.cleaned_data[name] for name in OrganizationAddForm.Meta.fields}
        return services.organization_create(
            name=settings.pop("name"), owner=settings.pop("owner"), **settings
        )

    def service_update(self, request, obj: Organization, form, changes: dict) -> None:
        services.organization_update(organization=obj, **changes)

    def service_delete(self, request, obj: Organization) -> None:
        services.organization_delete(organization=obj)


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
            services.membership_change_role(membership=obj, role=changes["role"])

    def service_delete(self, request, obj: Membership) -> None:
        services.membership_remove(membership=obj)


class InvitationForm(forms.ModelForm):
    class Meta:
        model = Invitation
        fields = ("organization", "email", "role")


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
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
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
