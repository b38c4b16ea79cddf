from django import forms
from django.contrib import admin

from . import services
from .addresses import AddressRefused, check_upstream_url
from .models import ProviderKey


class ProviderKeyForm(forms.ModelForm):
    secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="The upstream credential. Leave empty to keep the current one; a new value rotates it.",
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
        if self.instance._state.adding and not cleaned.get("secret"):
            self.add_error("secret", "A new provider key needs its secret.")
        if cleaned.get("base_url"):
            try:
                cleaned["base_url"] = check_upstream_url(cleaned["base_url"])
            except AddressRefused as error:
                self.add_error("base_url", error.message)
        return cleaned


@admin.register(ProviderKey)
class ProviderKeyAdmin(admin.ModelAdmin):
    form = ProviderKeyForm
    list_display = ("provider", "name", "masked", "organization", "weight", "data_region", "is_active")
    list_filter = ("provider", "data_region", "is_active")
    search_fields = ("name", "organization__name", "key_hint")
    readonly_fields = ("id", "masked", "rotated_at", "created_at", "updated_at")

    @admin.display(description="Key")
    def masked(self, obj: ProviderKey) -> str:
        return f"…{obj.key_hint}" if obj.key_hint else ""

    def save_model(self, request, obj, form, change) -> None:
        secret = form.cleaned_data.get("secret")
        if not change:
            fields = {name: form.cleaned_data[name] for name in ProviderKeyForm.Meta.fields}
            created = services.provider_key_create(secret=secret, **fields)
            obj.pk, obj._state.adding = created.pk, False
            return
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name != "secret"}
        services.provider_key_update(provider_key=obj, **changes)
        if secret:
            services.provider_key_rotate(provider_key=obj, secret=secret)
