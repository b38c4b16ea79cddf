from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from apps.core.errors import InvalidRequest
from apps.core.generations import bump_generation
from apps.events.models import EventType
from apps.events.publish import raise_event_on_commit
from apps.organizations.models import Organization

from .models import ProviderKey


@transaction.atomic
def provider_key_create(*, organization: Organization, secret: str, **fields) -> ProviderKey:
    provider_key = ProviderKey(organization=organization, **fields)
    provider_key.set_secret(secret)
    provider_key.save()
    bump_generation(organization.id)
    return provider_key


KEY_REQUIRED_MESSAGE = (
    "Changing the base URL needs the secret again: the stored one is never sent to a new address."
)


def base_url_needs_secret(changed: Iterable[str], secret: str | None) -> bool:
    """The rule, in one place (the admin form asks it too, to show the form again rather than a
    message): a change of ``base_url`` must bring the secret. Otherwise whoever may edit a key could
    point it at a server of their own and read the stored secret off the first request."""
    return "base_url" in changed and not secret


@transaction.atomic
def provider_key_update(*, provider_key: ProviderKey, secret: str | None = None, **changes) -> ProviderKey:
    """Applies ``changes``; a ``secret`` also rotates the key. Setting ``base_url`` needs the secret
    (``base_url_needs_secret``)."""
    if base_url_needs_secret(changes, secret):
        raise InvalidRequest(
            KEY_REQUIRED_MESSAGE, code="key_required", fields={"key": [KEY_REQUIRED_MESSAGE]}
        )
    for field, value in changes.items():
        setattr(provider_key, field, value)
    update_fields = [*changes, "updated_at"]
    if secret:
        provider_key.set_secret(secret)
        provider_key.rotated_at = timezone.now()
        update_fields += ["secret_encrypted", "key_hint", "rotated_at"]
    provider_key.save(update_fields=update_fields)
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
    raise_event_on_commit(
        locked.organization_id,
        EventType.PROVIDER_KEY_ROTATED,
        {"provider_key_id": str(locked.id), "provider": locked.provider},
    )
    return locked


@transaction.atomic
def provider_key_delete(*, provider_key: ProviderKey) -> None:
    organization_id = provider_key.organization_id
    provider_key.delete()
    bump_generation(organization_id)
