from django.db import models

from apps.core import crypto
from apps.core.models import UUIDModel
from apps.organizations.models import Organization, Role


class Protocol(models.TextChoices):
    OIDC = "oidc", "OpenID Connect"
    SAML = "saml", "SAML 2.0"


class MemberRole(models.TextChoices):
    """The role a user gets when single sign-on first adds them; never owner."""

    MEMBER = Role.MEMBER.value
    ADMIN = Role.ADMIN.value


class SsoConnection(UUIDModel):
    """An organization's identity provider. Sign-in finds the connection by the email's domain, so
    an active connection's domains are claimed across every organization (``SsoDomainClaim``).
    The client secret is encrypted at rest and never shown again: only its last four characters."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sso_connections")
    name = models.CharField(max_length=200)
    protocol = models.CharField(max_length=16, choices=Protocol.choices, default=Protocol.OIDC)
    # OpenID Connect only (empty for SAML).
    issuer = models.URLField(max_length=500, blank=True)
    client_id = models.CharField(max_length=500, blank=True)
    client_secret_encrypted = models.TextField(editable=False, blank=True)
    client_secret_hint = models.CharField(max_length=4, editable=False, blank=True)
    # SAML 2.0 only (empty for OpenID Connect): the identity provider's entity id, its single sign-on
    # URL (HTTP-Redirect binding) and its signing certificate (base64 DER, without the PEM armour).
    idp_entity_id = models.CharField(max_length=1024, blank=True, default="")
    idp_sso_url = models.CharField(max_length=1000, blank=True, default="")
    idp_certificate = models.TextField(blank=True, default="")
    # Lowercase domain names, sorted, without duplicates (apps/sso/validation.py).
    allowed_domains = models.JSONField(default=list)
    default_role = models.CharField(max_length=20, choices=MemberRole.choices, default=MemberRole.MEMBER)
    is_active = models.BooleanField(default=True)
    # Password sign-in refused for the organization's members (enforced with the sign-in flow).
    require_sso = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return self.name

    def set_client_secret(self, secret: str) -> None:
        self.client_secret_encrypted = crypto.encrypt(secret)
        self.client_secret_hint = secret[-4:]

    def client_secret(self) -> str:
        return crypto.decrypt(self.client_secret_encrypted)


class SsoDomainClaim(models.Model):
    """One row per domain of an active connection: within an organization the database, not a check
    before the write, keeps a domain to one active connection. Across organizations a claim alone
    decides nothing: sign-in routes a domain, and ``require_sso`` refuses passwords, only through the
    organization that proved it (``SsoDomain``). Kept by apps/sso/services.py."""

    domain = models.CharField(max_length=253)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    connection = models.ForeignKey(SsoConnection, on_delete=models.CASCADE, related_name="domain_claims")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("organization", "domain"), name="sso_one_active_claim_per_domain")
        ]

    def __str__(self) -> str:
        return self.domain


class DomainVerification(models.TextChoices):
    DNS = "dns", "DNS TXT record"
    OPERATOR = "operator", "Approved by an operator"


class SsoDomain(UUIDModel):
    """An email domain an organization's connections name, and whether the organization has proved it
    owns it: a TXT record with ``token`` at ``_<brand>-challenge.<domain>``, or an operator's approval
    in the Django admin. Until then the domain routes nobody to the organization's identity provider
    and refuses no one's password. One organization at most holds a domain verified (the database
    says so). The row goes when none of the organization's connections names the domain any more."""

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="sso_domains")
    domain = models.CharField(max_length=253)
    token = models.CharField(max_length=64, editable=False)
    verified_at = models.DateTimeField(null=True, blank=True)
    verified_by = models.CharField(max_length=16, choices=DomainVerification.choices, blank=True, default="")
    # The operator who approved it (an email, kept as text: the account may go, the record stays).
    approved_by = models.CharField(max_length=254, blank=True, default="")

    class Meta:
        ordering = ("domain",)
        constraints = [
            models.UniqueConstraint(
                fields=("organization", "domain"), name="sso_domain_once_per_organization"
            ),
            models.UniqueConstraint(
                fields=("domain",),
                condition=models.Q(verified_at__isnull=False),
                name="sso_domain_verified_once",
            ),
        ]

    def __str__(self) -> str:
        return self.domain

    @property
    def is_verified(self) -> bool:
        return self.verified_at is not None
