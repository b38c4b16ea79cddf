from django import forms
from django.contrib import admin, messages

from apps.core.admin_mixins import ServiceAdmin
from apps.core.errors import GatewayError

from . import services
from .models import Protocol, SsoConnection, SsoDomain
from .validation import clean_domains, clean_issuer


class DomainsField(forms.CharField):
    """Domains separated by commas or spaces."""

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        return super().to_python(value).replace(",", " ").split()

    def validate(self, value: list[str]) -> None:
        try:
            clean_domains(value)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self, value) -> list[str]:
        return clean_domains(super().clean(value))

    def has_changed(self, initial, data) -> bool:
        try:
            return sorted(initial or ()) != clean_domains(self.to_python(data))
        except ValueError:
            return True


class SsoConnectionForm(forms.ModelForm):
    client_secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        min_length=services.SECRET_MIN_LENGTH,
        max_length=services.SECRET_MAX_LENGTH,
        help_text="Leave empty to keep the current one.",
    )
    issuer = forms.CharField(
        max_length=500, required=False, help_text="OpenID Connect: https URL without query or fragment."
    )
    client_id = forms.CharField(max_length=500, required=False, help_text="OpenID Connect.")
    idp_entity_id = forms.CharField(max_length=1024, required=False, help_text="SAML 2.0.")
    idp_sso_url = forms.CharField(max_length=1000, required=False, help_text="SAML 2.0: https URL.")
    idp_certificate = forms.CharField(
        widget=forms.Textarea, required=False, help_text="SAML 2.0: PEM or its base64 body."
    )
    allowed_domains = DomainsField(help_text="Email domains, separated by commas: example.com, example.org")

    class Meta:
        model = SsoConnection
        fields = (
            "organization",
            "name",
            "protocol",
            "issuer",
            "client_id",
            "idp_entity_id",
            "idp_sso_url",
            "idp_certificate",
            "allowed_domains",
            "default_role",
            "is_active",
            "require_sso",
        )

    def clean_issuer(self) -> str:
        if not self.cleaned_data["issuer"]:
            return ""
        try:
            return clean_issuer(self.cleaned_data["issuer"])
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean(self):
        cleaned = super().clean()
        saml = cleaned.get("protocol") == Protocol.SAML
        if self.instance._state.adding and not saml and not cleaned.get("client_secret"):
            self.add_error("client_secret", "A new connection needs its client secret.")
        return cleaned


@admin.register(SsoConnection)
class SsoConnectionAdmin(ServiceAdmin):
    """Writes through the services: the plan rule and the domain claims hold here too."""

    form = SsoConnectionForm
    list_display = ("name", "organization", "protocol", "issuer", "masked", "is_active", "require_sso")
    list_filter = ("protocol", "is_active", "require_sso")
    search_fields = ("name", "organization__name", "issuer", "client_id")
    readonly_fields = ("id", "masked", "created_at", "updated_at")

    @admin.display(description="Client secret")
    def masked(self, obj: SsoConnection) -> str:
        return f"…{obj.client_secret_hint}" if obj.client_secret_hint else ""

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:
            return (*self.readonly_fields, "organization")
        return self.readonly_fields

    def service_create(self, request, form) -> SsoConnection:
        fields = {name: form.cleaned_data[name] for name in SsoConnectionForm.Meta.fields}
        fields["client_secret"] = form.cleaned_data["client_secret"]
        # The services take the fields of the connection's protocol only.
        for protocol, names in services.PROTOCOL_FIELDS.items():
            if protocol != fields["protocol"]:
                for name in names:
                    fields.pop(name, None)
        return services.sso_connection_create(**fields)

    def service_update(self, request, obj: SsoConnection, form, changes: dict) -> None:
        services.sso_connection_update(
            connection=obj, client_secret=form.cleaned_data.get("client_secret") or None, **changes
        )

    def service_delete(self, request, obj: SsoConnection) -> None:
        services.sso_connection_delete(connection=obj)


@admin.register(SsoDomain)
class SsoDomainAdmin(admin.ModelAdmin):
    """The domains the connections name, with their proof. Read only but for the two actions, which
    go through the services: an operator approves a domain the organization owns (checked some other
    way than DNS), or withdraws a proof. Domains come and go with the connections that name them."""

    list_display = ("domain", "organization", "is_verified", "verified_by", "verified_at", "approved_by")
    list_filter = ("verified_by",)
    search_fields = ("domain", "organization__name")
    readonly_fields = (
        "id",
        "organization",
        "domain",
        "verified_at",
        "verified_by",
        "approved_by",
        "created_at",
    )
    fields = readonly_fields
    actions = ("approve", "withdraw")

    @admin.display(boolean=True, description="Proved")
    def is_verified(self, obj: SsoDomain) -> bool:
        return obj.is_verified

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Approve: the organization owns these domains", permissions=["change"])
    def approve(self, request, queryset) -> None:
        for sso_domain in queryset:
            try:
                services.sso_domain_approve(sso_domain=sso_domain, approved_by=request.user.email)
            except GatewayError as error:
                self.message_user(request, f"{sso_domain.domain}: {error.message}", messages.ERROR)
            else:
                self.message_user(request, f"{sso_domain.domain} is proved for {sso_domain.organization}.")

    @admin.action(description="Withdraw the proof", permissions=["change"])
    def withdraw(self, request, queryset) -> None:
        for sso_domain in queryset:
            services.sso_domain_withdraw(sso_domain=sso_domain)
        self.message_user(request, f"Withdrew the proof of {queryset.count()} domain(s).")
