from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ServiceAdmin

from . import services
from .models import Policy


class ListField(forms.CharField):
    """One item a line (patterns may hold commas and spaces); empty means none."""

    widget = forms.Textarea(attrs={"rows": 3})

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("required", False)
        super().__init__(strip=False, **kwargs)

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        return [line.strip("\r") for line in (super().to_python(value) or "").split("\n") if line.strip()]

    def has_changed(self, initial, data) -> bool:
        return list(initial or ()) != self.to_python(data)


class PolicyForm(forms.ModelForm):
    detectors = ListField(
        help_text="One a line: email, phone, payment_card, iban, us_ssn, ip_address, secret."
    )
    patterns = ListField(help_text="Regular expressions, one a line.")
    terms = ListField(help_text="Denied words or phrases, one a line.")
    denied_models = ListField()
    scope_teams = ListField(help_text="Team ids, one a line; empty: every team.")
    scope_api_keys = ListField(help_text="API key ids, one a line; empty: every key.")
    scope_models = ListField(help_text="Models, one a line; empty: every model.")

    class Meta:
        model = Policy
        fields = ("organization", "name", "action", *services.FIELDS[2:])


def _data(values: dict) -> dict:
    """The form's values as the services take them (apps/policies/inputs.py), which check them: the
    scope's three fields gathered into ``scope``."""
    data = {name: value for name, value in values.items() if not name.startswith("scope_")}
    scope = {name[len("scope_") :]: value for name, value in values.items() if name.startswith("scope_")}
    if scope:
        data["scope"] = scope
    return data


@admin.register(Policy)
class PolicyAdmin(ServiceAdmin):
    """Writes go through the services: values are checked (patterns compiled) and every proxy worker
    rebuilds its policies on its next request."""

    form = PolicyForm
    list_display = ("name", "organization", "action", "order", "is_active", "updated_at")
    list_filter = ("organization", "action", "is_active")
    search_fields = ("name", "organization__name")
    readonly_fields = ("id", "created_at", "updated_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:  # a policy belongs to its organization for good
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def service_create(self, request, form) -> Policy:
        values = {name: form.cleaned_data[name] for name in services.FIELDS}
        return services.policy_create(organization=form.cleaned_data["organization"], data=_data(values))

    def service_update(self, request, obj: Policy, form, changes: dict) -> None:
        services.policy_update(policy=obj, data=_data(changes))

    def service_delete(self, request, obj: Policy) -> None:
        services.policy_delete(policy=obj)
