import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from apps.core.errors import Conflict
from apps.core.generations import bump_generation
from apps.organizations.models import Organization

from .models import Team


def team_create(*, organization: Organization, name: str, slug: str = "", allowed_data_regions=()) -> Team:
    slug = slug or slugify(name)[:80] or f"team-{secrets.token_hex(3)}"
    if Team.objects.filter(organization=organization, slug=slug).exists():
        raise Conflict(f"A team with the slug '{slug}' exists already.", code="team_slug_taken")
    try:
        with transaction.atomic():
            team = Team.objects.create(
                organization=organization,
                name=name,
                slug=slug,
                allowed_data_regions=list(allowed_data_regions),
            )
            bump_generation(organization.id)  # the proxy resolves teams from memory
            return team
    except IntegrityError as error:  # a concurrent request took the slug between the check and the insert
        raise Conflict(f"A team with the slug '{slug}' exists already.", code="team_slug_taken") from error


def team_update(*, team: Team, **changes) -> Team:
    new_slug = changes.get("slug")
    if new_slug and new_slug != team.slug:
        if Team.objects.filter(organization=team.organization_id, slug=new_slug).exists():
            raise Conflict(f"A team with the slug '{new_slug}' exists already.", code="team_slug_taken")
    for field, value in changes.items():
        setattr(team, field, value)
    try:
        with transaction.atomic():
            team.save(update_fields=[*changes, "updated_at"])
            bump_generation(team.organization_id)
    except IntegrityError as error:
        raise Conflict(
            f"A team with the slug '{new_slug}' exists already.", code="team_slug_taken"
        ) from error
    return team


@transaction.atomic
def team_delete(*, team: Team) -> None:
    usable = team.api_keys.filter(is_active=True).exclude(expires_at__lte=timezone.now())
    if usable.exists():
        raise Conflict(
            "This team still has active API keys bound to it; revoke them first.", code="team_has_active_keys"
        )
    organization_id = team.organization_id
    team.delete()
    bump_generation(organization_id)
