from django.db import transaction
from django.utils import timezone

from apps.core.generations import bump_generation
from apps.organizations.models import Organization

from .models import ProviderKey


@transaction.atomic
def provider_key_create(*, organization: Organization, secret: str, **fields) -> ProviderKey:
    provider_key = ProviderKey(organization=organization, **fields)
    provider_key.set_secret(secret)
    provider_key.save()
    bump_generation(organization.id)
    return provider_key


@transaction.atomic
def provider_key_update(*, provider_key: ProviderKey, **changes) -> ProviderKey:
    for field, value in changes.items():
        setattr(provider_key, field, value)
    provider_key.save(update_fields=[*changes, "updated_at"])
    bump_generation(provider_key.organization_id)
    return provider_key


@transaction.atomic
def provider_key_rotate(*, provider_key: ProviderKey, secret: str) -> ProviderKey:
    """Replaces the secret in place: the key keeps its id, weight and region, so routing never has
    a gap. Requests already in flight finish with the secret they started with; no request that
    starts after this commits uses the old one (apps/core/generations.py)."""
    locked = ProviderKey.objects.select_for_update().get(pk=provider_key.pk)
    locked.set_secret(secret)
    locked.rotated_at = timezone.now()
    locked.save(update_fields=["secret_encrypted", "key_hint", "rotated_at", "updated_at"])
    bump_generation(locked.organization_id)
    return locked


@transaction.atomic
def provider_key_delete(*, provider_key: ProviderKey) -> None:
    organization_id = provider_key.organization_id
    provider_key.delete()
    bump_generation(organization_id)
