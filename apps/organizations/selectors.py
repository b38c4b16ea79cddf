"""Reads of organizations."""

from dataclasses import dataclass

from .models import Organization


@dataclass(frozen=True, slots=True)
class OrganizationSnapshot:
    """What the proxy holds of an organization: plain data, no model instance."""

    id: str
    allowed_data_regions: frozenset[str]
    log_bodies: str
    limits_fail_mode: str


def organization_snapshot(organization_id) -> OrganizationSnapshot | None:
    organization = (
        Organization.objects.filter(pk=organization_id)
        .only("allowed_data_regions", "log_bodies", "limits_fail_mode")
        .first()
    )
    if organization is None:
        return None
    return OrganizationSnapshot(
        id=str(organization.id),
        allowed_data_regions=frozenset(organization.allowed_data_regions),
        log_bodies=organization.log_bodies,
        limits_fail_mode=organization.limits_fail_mode,
    )
