from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from apps.core.admin_mixins import ModelPatternsField, service_errors_on
from apps.limits.admin import limits_summary

from . import services
from .models import ApiKey, Permission

# The writable fields this form has besides its organization and team, as the services take them.
FIELDS = ("name", "permissions", "expires_at", "allowed_models")


class ApiKeyAddForm(forms.ModelForm):
    permissions = forms.MultipleChoiceField(
        choices=Permission.choices, initial=[Permission.LLM], widget=forms.CheckboxSelectMultiple
    )
    allowed_models = ModelPatternsField()

    class Meta:
        model = ApiKey
        fields = ("organization", "team", "name", "permissions", "expires_at", "allowed_models")

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("organization") is not None:
            # The service's rules (a team of the organization, an expiry in the future, ...), shown on
            # the form's fields before the save asks the service again.
            with service_errors_on(self, aliases={"team_id": "team"}):
                services.api_key_check(organization=cleaned["organization"], data=self.key_input())
        return cleaned

    def key_input(self) -> dict:
        """The form's values as the services take them (inputs.py ``ApiKeyInputSerializer``)."""
        data = {name: self.cleaned_data[name] for name in FIELDS if name in self.cleaned_data}
        team = self.cleaned_data.get("team")
        data["team_id"] = None if team is None else str(team.pk)
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys can be created here (the secret is shown once, on the page after saving), inspected
    and revoked; they are never edited or deleted, so the audit trail stays whole."""

    list_display = ("name", "key_prefix", "organization", "team", "status", "expires_at", "last_used_at")
    list_filter = ("is_active", "organization")
    search_fields = ("name", "key_prefix", "organization__name")
    list_select_related = ("organization", "team")
    actions = ("revoke_selected",)
    readonly_fields = (
        "id",
        "organization",
        "team",
        "name",
        "key_prefix",
        "permissions",
        "allowed_models",
        "is_active",
        "expires_at",
        "revoked_at",
        "last_used_at",
        "created_by",
        "created_at",
        "budget_and_rate_limits",
    )

    @admin.display(description="Budget and rate limits")
    def budget_and_rate_limits(self, obj: ApiKey) -> str:
        return limits_summary(getattr(obj, "limits", None), organization=obj.organization_id, api_key=obj.pk)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        return ApiKeyAddForm.Meta.fields if obj is None else self.readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        if change:  # every field is read-only once the key exists; revoking is an action
            super().save_model(request, obj, form, change)
            return
        # Created by the service the API uses (its event, its limits), then the admin's unsaved
        # object becomes that key, for the page that shows the secret and the admin's history.
        created, secret = services.api_key_create(
            organization=obj.organization, data=form.key_input(), created_by=request.user
        )
        for field in created._meta.concrete_fields:
            setattr(obj, field.attname, getattr(created, field.attname))
        obj._state.adding, obj._state.db = False, created._state.db
        obj._shown_once_secret = secret

    def response_add(self, request, obj, post_url_continue=None):
        # Rendered directly, not through a redirect and the messages framework, so the secret is
        # never written to a cookie or the session.
        context = {
            **self.admin_site.each_context(request),
            "api_key": obj,
            "secret": obj._shown_once_secret,
            "warning": services.KEY_WARNING,
            "opts": self.opts,
        }
        return TemplateResponse(request, "admin/keys/apikey/created.html", context)

    # Revoking writes: a staff user who may only view keys must not see or run it.
    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke_selected(self, request, queryset) -> None:
        revoked = 0
        for api_key in queryset:
            if api_key.is_active:
                services.api_key_revoke(api_key=api_key)
                revoked += 1
        messages.success(request, f"Revoked {revoked} key(s).")
