from django import forms
from django.contrib import admin

from apps.core.admin_mixins import ServiceAdmin

from . import services
from .addresses import AddressRefused, check_upstream_url
from .models import ProviderKey, missing_settings


class ProviderKeyForm(forms.ModelForm):
    secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        min_length=4,
        max_length=4096,
        help_text="The upstream credential. Leave empty to keep the current one; a new value rotates it.",
    )
    # Declared so that Django does not build it from the model field with the old default scheme.
    base_url = forms.URLField(
        assume_scheme="https",
        max_length=500,
        required=False,
        help_text="Empty for the provider's default; Azure OpenAI and OpenAI-compatible servers need one.",
    )

    class Meta:
        model = ProviderKey
        fields = (
            "organization",
            "provider",
            "name",
            "weight",
            "data_region",
            "base_url",
            "api_version",
            "supports_stream_usage",
            "is_active",
        )

    def clean(self):
        cleaned = super().clean()
        adding = self.instance._state.adding
        if adding and not cleaned.get("secret"):
            self.add_error("secret", "A new provider key needs its secret.")
        # The service's rule, asked here so the form comes back with what was typed.
        if not adding and services.base_url_needs_secret(self.changed_data, cleaned.get("secret")):
            self.add_error("secret", services.KEY_REQUIRED_MESSAGE)
        # Checked again only when it changes: a later, stricter setting must not block draining a key.
        if cleaned.get("base_url") and (adding or "base_url" in self.changed_data):
            try:
                cleaned["base_url"] = check_upstream_url(cleaned["base_url"])
            except AddressRefused as error:
                self.add_error("base_url", error.message)
        provider = cleaned.get("provider") or self.instance.provider
        if provider:
            missing = missing_settings(
                provider, base_url=cleaned.get("base_url", ""), api_version=cleaned.get("api_version", "")
            )
            for field, message in missing.items():
                if field not in self.errors:
                    self.add_error(field, message)
        return cleaned


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
        fields = {name: form.cleaned_data[name] for name in ProviderKeyForm.Meta.fields}
        return services.provider_key_create(secret=form.cleaned_data.get("secret"), **fields)

    def service_update(self, request, obj: ProviderKey, form, changes: dict) -> None:
        services.provider_key_update(
            provider_key=obj, secret=form.cleaned_data.get("secret") or None, **changes
        )

    def service_delete(self, request, obj: ProviderKey) -> None:
        services.provider_key_delete(provider_key=obj)
