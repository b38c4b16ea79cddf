from django import forms
from django.contrib import admin, messages

from apps.core.admin_mixins import ServiceAdmin, service_errors_on
from apps.core.errors import GatewayError

from . import services
from .inputs import PROTOCOL_FIELDS
from .models import Protocol, SsoConnection, SsoDomain

# The writable fields besides those of a protocol, as the services take them (inputs.py), which
# check them.
FIELDS = ("name", "protocol", "allowed_domains", "default_role", "is_active", "require_sso")
ALL_PROTOCOL_FIELDS = (*PROTOCOL_FIELDS[Protocol.OIDC], *PROTOCOL_FIELDS[Protocol.SAML])


class DomainsField(forms.CharField):
    """Domains separated by commas or spaces; the services check them."""

    def prepare_value(self, value):
        return ", ".join(value) if isinstance(value, list | tuple) else value

    def to_python(self, value) -> list[str]:
        return super().to_python(value).replace(",", " ").split()

    def has_changed(self, initial, data) -> bool:
        return sorted(initial or ()) != sorted({domain.lower() for domain in self.to_python(data)})


class SsoConnectionForm(forms.ModelForm):
    client_secret = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Leave empty to keep the current one.",
    )
    issuer = forms.CharField(required=False, help_text="OpenID Connect: https URL without query or fragment.")
    client_id = forms.CharField(required=False, help_text="OpenID Connect.")
    idp_entity_id = forms.CharField(required=False, help_text="SAML 2.0.")
    idp_sso_url = forms.CharField(required=False, help_text="SAML 2.0: https URL.")
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

    def clean(self):
        cleaned = super().clean()
        # The service's rules (the fields of one protocol, an issuer whose address is allowed, ...),
        # shown on the form's fields before the save asks the service again: the values typed, or on
        # a change those changed.
        data = service_input(cleaned, creating=self.instance._state.adding, changed=self.changed_data)
        # A domain's refusal names its place in the list (allowed_domains[1]): shown on the field.
        domains = {
            f"allowed_domains[{index}]": "allowed_domains"
            for index in range(len(data.get("allowed_domains", ())))
        }
        with service_errors_on(self, aliases=domains):
            services.sso_connection_check(data=data, partial=not self.instance._state.adding)
        return cleaned


def service_input(cleaned: dict, *, creating: bool, changed) -> dict:
    """The form's values as the services take them (inputs.py): a new connection's fields and those of
    its protocol filled in, or a change's changed fields; the secret when one was typed."""
    if creating:
        data = {name: cleaned[name] for name in FIELDS if name in cleaned}
        for name in PROTOCOL_FIELDS.get(cleaned.get("protocol"), ()):
            if cleaned.get(name):
                data[name] = cleaned[name]
        return data
    names = (*FIELDS, *ALL_PROTOCOL_FIELDS)
    data = {name: cleaned[name] for name in changed if name in names and name in cleaned}
    data.pop("client_secret", None)
    if cleaned.get("client_secret"):
        data["client_secret"] = cleaned["client_secret"]
    return data


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
        return services.sso_connection_create(
            organization=form.cleaned_data["organization"],
            data=service_input(form.cleaned_data, creating=True, changed=form.changed_data),
        )

    def service_update(self, request, obj: SsoConnection, form, changes: dict) -> None:
        services.sso_connection_update(
            connection=obj, data=service_input(form.cleaned_data, creating=False, changed=form.changed_data)
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
