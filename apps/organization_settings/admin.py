"""The Django admin's organization page: its settings, its members (read only) and its budget and rate
limits (apps/limits), so it lives here, above both; members and invitations are apps/organizations/admin.py.
Writes go through the services: a change through the settings' (apps/organization_settings/services.py),
whose rules the form shows on its fields."""

from django import forms
from django.contrib import admin

from apps.accounts.models import User
from apps.core.admin_mixins import DataRegionsField, ModelPatternsField, ServiceAdmin, service_errors_on
from apps.limits.admin import limits_summary
from apps.limits.selectors import limits_of
from apps.organization_settings import services as settings_services
from apps.organizations import services
from apps.organizations.models import Membership, Organization


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
    """The settings, checked by the services (the organization's input, apps/organizations/inputs.py,
    and the rules across domains), shown on the form's fields; the slug is made from the name when the
    organization is created, as the API does."""

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
            "cache_enabled",
            "cache_ttl_seconds",
            "cache_any_temperature",
            "cache_semantic_enabled",
            "cache_semantic_threshold",
            "cache_embedding_model",
        )
        # Plans are the operator's to give: members never see theirs in the console.
        help_texts = {
            "plan": "Set by the gateway's operators, here only: growth and enterprise may connect single "
            "sign-on. The console does not show the plan to members."
        }

    def clean(self):
        cleaned = super().clean()
        # The services' rules, shown on the form's fields before the save asks the services again:
        # the values typed, or on a change those changed.
        names = self._meta.fields if self.instance._state.adding else self.changed_data
        with service_errors_on(self):
            services.organization_check(
                data={name: cleaned[name] for name in names if name in cleaned and name != "owner"},
                partial=True,
            )
        cache = ("cache_semantic_enabled", "cache_embedding_model")
        with service_errors_on(self):
            settings_services.organization_settings_check(
                organization=self.instance, changes={name: cleaned[name] for name in cache if name in cleaned}
            )
        return cleaned


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
        fields = [name for name in OrganizationAddForm.Meta.fields if name != "owner"]
        return services.organization_create(
            owner=form.cleaned_data["owner"], data={name: form.cleaned_data[name] for name in fields}
        )

    def service_update(self, request, obj: Organization, form, changes: dict) -> None:
        settings_services.organization_settings_update(organization=obj, **changes)

    def service_delete(self, request, obj: Organization) -> None:
        services.organization_delete(organization=obj)
