from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ServiceAdmin, service_errors_on

from . import services
from .models import ProviderKey

# The writable fields, as the services take them (inputs.py), which check them; the form's secret is
# the input's key.
FIELDS = (
    "provider",
    "name",
    "weight",
    "data_region",
    "base_url",
    "api_version",
    "supports_stream_usage",
    "speaks_responses",
)
CHANGE_FIELDS = (*FIELDS, "is_active")


class ProviderKeyForm(forms.ModelForm):
    secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="The upstream credential. Leave empty to keep the current one; a new value rotates it.",
        error_messages={"required": "A new provider key needs its secret."},
    )
    # Declared so that Django does not build it from the model field with the old default scheme.
    base_url = forms.URLField(
        assume_scheme="https",
        required=False,
        help_text="Empty for the provider's default; Azure OpenAI and OpenAI-compatible servers need one.",
    )

    class Meta:
        model = ProviderKey
        fields = ("organization", *CHANGE_FIELDS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A new key needs its secret; a change keeps the stored one when the field is left empty.
        self.fields["secret"].required = self.instance._state.adding

    def clean(self):
        cleaned = super().clean()
        if self.errors:  # the form's own messages first, not the services' same ones again
            return cleaned
        # The service's rules (what the provider needs, a base URL's address and its secret), shown
        # on the form's fields before the save asks the service again.
        adding = self.instance._state.adding
        with service_errors_on(self, aliases={"key": "secret"}):
            services.provider_key_check(
                data=service_input(cleaned, creating=adding, changed=self.changed_data),
                provider_key=None if adding else self.instance,
            )
        return cleaned


def service_input(cleaned: dict, *, creating: bool, changed) -> dict:
    """The form's values as the services take them (inputs.py): a new key's fields, or a change's
    changed fields, and the secret when one was typed. On a change the secret goes with the base URL
    on the form, the address it is for (the services take a change's secret only with one)."""
    if creating:
        data = {name: cleaned[name] for name in FIELDS if name in cleaned}
    else:
        data = {name: cleaned[name] for name in changed if name in CHANGE_FIELDS and name in cleaned}
    if cleaned.get("secret"):
        data["key"] = cleaned["secret"]
        data.setdefault("base_url", cleaned.get("base_url", ""))
    return data


@admin.register(ProviderKey)
class ProviderKeyAdmin(ServiceAdmin):
    """Every write goes through the services, so each one bumps the organization's configuration
    generation and proxy workers stop using a deleted or rotated key at once."""

    form = ProviderKeyForm
    list_display = ("provider", "name", "masked", "organization", "weight", "data_region", "is_active")
    list_filter = ("provider", "data_region", "is_active")
    search_fields = ("name", "organization__name", "key_hint")
    readonly_fields = ("id", "masked", "rotated_at", "created_at", "updated_at")

    @admin.display(description="Key")
    def masked(self, obj: ProviderKey) -> str:
        return f"…{obj.key_hint}" if obj.key_hint else ""

    def get_readonly_fields(self, request, obj=None):
        # Moving a key between organizations would leave the first one's workers using it.
        if obj is not None:
            return (*self.readonly_fields, "organization", "provider")
        return self.readonly_fields

    def service_create(self, request, form) -> ProviderKey:
        provider_key = services.provider_key_create(
            organization=form.cleaned_data["organization"],
            data=service_input(form.cleaned_data, creating=True, changed=form.changed_data),
        )
        if not form.cleaned_data["is_active"]:
            # A key is created active (the API's POST has no is_active): the unticked box is a change.
            services.provider_key_update(provider_key=provider_key, data={"is_active": False})
        return provider_key

    def service_update(self, request, obj: ProviderKey, form, changes: dict) -> None:
        services.provider_key_update(
            provider_key=obj, data=service_input(form.cleaned_data, creating=False, changed=form.changed_data)
        )

    def service_delete(self, request, obj: ProviderKey) -> None:
        services.provider_key_delete(provider_key=obj)
