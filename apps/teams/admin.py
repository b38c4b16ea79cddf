from django import forms
from django.contrib import admin

from apps.core.admin_mixins import DataRegionsField, ModelPatternsField, ServiceAdmin, service_errors_on
from apps.limits.admin import limits_summary

from . import services
from .models import Team, TeamMembership

# The writable fields, as the services take them (inputs.py), which check them.
FIELDS = ("name", "slug", "allowed_data_regions", "allowed_models")


class TeamForm(forms.ModelForm):
    allowed_data_regions = DataRegionsField()
    allowed_models = ModelPatternsField()

    class Meta:
        model = Team
        fields = ("organization", *FIELDS)

    def clean(self):
        cleaned = super().clean()
        # The service's rules (model patterns within bounds, ...), shown on the form's fields before
        # the save asks the service again: the values typed, or on a change those changed.
        names = FIELDS if self.instance._state.adding else self.changed_data
        with service_errors_on(self):
            services.team_check(
                data={name: cleaned[name] for name in names if name in cleaned and name in FIELDS},
                partial=True,
            )
        return cleaned


@admin.register(Team)
class TeamAdmin(ServiceAdmin):
    """Writes go through the services: every proxy worker sees a team's regions on its next request,
    and a team with active API keys cannot be deleted (its keys would silently lose their team)."""

    form = TeamForm
    list_display = ("name", "slug", "organization", "created_at")
    list_filter = ("organization",)
    search_fields = ("name", "slug", "organization__name")
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = ("id", "created_at", "updated_at", "budget_and_rate_limits")

    @admin.display(description="Budget and rate limits")
    def budget_and_rate_limits(self, obj: Team) -> str:
        if obj.pk is None:
            return "Set once the team exists."
        return limits_summary(getattr(obj, "limits", None), organization=obj.organization_id, team=obj.pk)

    def get_readonly_fields(self, request, obj=None):
        # The team's keys and usage belong to its organization: a team cannot move.
        if obj is not None:
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def service_create(self, request, form) -> Team:
        return services.team_create(
            organization=form.cleaned_data["organization"],
            data={name: form.cleaned_data[name] for name in FIELDS},
        )

    def service_update(self, request, obj: Team, form, changes: dict) -> None:
        services.team_update(team=obj, data=changes)

    def service_delete(self, request, obj: Team) -> None:
        services.team_delete(team=obj)


class TeamMembershipForm(forms.ModelForm):
    class Meta:
        model = TeamMembership
        fields = ("team", "user")


@admin.register(TeamMembership)
class TeamMembershipAdmin(ServiceAdmin):
    """Who belongs to which team (a member reads their teams' usage). Added and removed through the
    services, which refuse a user of another organization; a membership is never edited, only
    removed and added again."""

    form = TeamMembershipForm
    list_display = ("user", "team", "created_at")
    list_filter = ("team__organization",)
    search_fields = ("user__email", "team__name", "team__slug")
    readonly_fields = ("created_at",)

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return (*self.readonly_fields, "team", "user")
        return self.readonly_fields

    def service_create(self, request, form) -> TeamMembership:
        return services.team_member_add(
            team=form.cleaned_data["team"], data={"user_id": str(form.cleaned_data["user"].pk)}
        )

    def service_update(self, request, obj: TeamMembership, form, changes: dict) -> None:
        pass  # nothing of a membership can change: its two fields are read-only once it exists

    def service_delete(self, request, obj: TeamMembership) -> None:
        services.team_member_remove(membership=obj)
