import secrets

from django.db import transaction
from django.utils.text import slugify

from apps.accounts.models import User
from apps.core.generations import bump_generation

from .models import Membership, Organization, Role


def unique_organization_slug(name: str) -> str:
    base = slugify(name)[:60] or "org"
    slug = base
    while Organization.objects.filter(slug=slug).exists():
        slug = f"{base}-{secrets.token_hex(3)}"
    return slug


@transaction.atomic
def organization_create(*, name: str, owner: User, plan: str = "free", **settings) -> Organization:
    """``settings``: log_bodies, log_retention_days, allowed_data_regions (the model's defaults otherwise)."""
    organization = Organization.objects.create(
        name=name, slug=unique_organization_slug(name), plan=plan, **settings
    )
    Membership.objects.create(organization=organization, user=owner, role=Role.OWNER)
    return organization


def organization_update(*, organization: Organization, **changes) -> Organization:
    for field, value in changes.items():
        setattr(organization, field, value)
    organization.save(update_fields=[*changes, "updated_at"])
    bump_generation(organization.id)  # allowed regions shape routing
    return organization


@transaction.atomic
def organization_delete(*, organization: Organization) -> None:
    """Deletes the organization with everything it owns. The bumped generation makes every proxy
    worker drop its copy on the next request. (The admin refuses while the organization has API
    keys: keys are never deleted, so the audit trail stays whole.)"""
    organization_id = organization.id
    organization.delete()
    bump_generation(organization_id)


@transaction.atomic
def first_admin_bootstrap(
    *, email: str, password: str | None, organization_name: str
) -> tuple[Organization, User, str | None] | None:
    """Creates the first organization and its owner when the gateway has none yet.

    Returns None when an organization exists already. The generated password (when none was given)
    is returned so the caller can show it once; it is never stored in clear.
    """
    if Organization.objects.exists():
        return None
    generated = None
    user = User.objects.filter(email__iexact=email).first()
    if user is None:
        if not password:
            generated = password = secrets.token_urlsafe(18)
        user = User.objects.create_superuser(email=email, password=password)
    organization = organization_create(name=organization_name, owner=user, plan="enterprise")
    return organization, user, generated
