from django.db.models import QuerySet

from .models import SsoConnection, SsoDomainClaim


def sso_connections(*, organization_id) -> QuerySet[SsoConnection]:
    return SsoConnection.objects.filter(organization_id=organization_id)


def active_connection_for_domain(domain: str) -> SsoConnection | None:
    """The active connection that owns an email domain, of whichever organization (for sign-in)."""
    claim = (
        SsoDomainClaim.objects.select_related("connection__organization")
        .filter(domain=domain.strip().lower(), connection__is_active=True)
        .first()
    )
    return claim.connection if claim else None
