from django.db.models import QuerySet

from .models import SsoConnection, SsoDomain, SsoDomainClaim


def sso_connections(*, organization_id) -> QuerySet[SsoConnection]:
    return SsoConnection.objects.filter(organization_id=organization_id)


def sso_domains(*, organization_id) -> QuerySet[SsoDomain]:
    return SsoDomain.objects.filter(organization_id=organization_id)


def active_connection_for_domain(domain: str) -> SsoConnection | None:
    """The active connection that signs in an email domain: that of the organization which proved
    the domain (``SsoDomain``), whichever organization it is (for sign-in). An unproved claim is no
    one's: None."""
    domain = domain.strip().lower()
    claim = (
        SsoDomainClaim.objects.select_related("connection__organization")
        .filter(
            domain=domain,
            connection__is_active=True,
            organization__sso_domains__domain=domain,
            organization__sso_domains__verified_at__isnull=False,
        )
        .first()
    )
    return claim.connection if claim else None


def domain_proved_by(*, organization_id, domain: str) -> bool:
    return SsoDomain.objects.filter(
        organization_id=organization_id, domain=domain.strip().lower(), verified_at__isnull=False
    ).exists()
