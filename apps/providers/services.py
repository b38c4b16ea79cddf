"""Writes of provider keys. Each bumps the organization's configuration generation, so proxy workers
use the change on their next request (apps/core/generations.py).

Every value is checked here, for the API, the admin and the console alike: the input's types and
shapes, parsed by inputs.py (``validated``), then what a schema cannot say (``provider_key_check``: a
change against the stored key, a new base URL's secret). No message repeats a secret."""

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.core.api.serializers import validated
from apps.core.errors import InvalidRequest, invalid_fields
from apps.core.generations import bump_generation
from apps.events.models import EventType
from apps.events.publish import raise_event_on_commit
from apps.organizations.models import Organization

from .inputs import (
    ProviderKeyChangeInputSerializer,
    ProviderKeyCreateInputSerializer,
    ProviderKeyRotateInputSerializer,
)
from .models import ProviderKey, missing_settings

KEY_REQUIRED_MESSAGE = (
    "Changing the base URL needs the secret again: the stored one is never sent to a new address."
)
REPLACEMENT_REQUIRED_MESSAGE = (
    'Send the replacement secret as {"key": "<new provider key>"}: a provider cannot be '
    "asked for a new key by the gateway."
)


def provider_key_check(*, data: Mapping, provider_key: ProviderKey | None = None) -> dict[str, Any]:
    """``data`` as a key stores it (the secret still in ``key``): for a new key the API's POST body
    (inputs.py ``ProviderKeyCreateInputSerializer``: with what its provider needs), for a change of
    ``provider_key`` the API's PATCH body (``ProviderKeyChangeInputSerializer``, only the fields it
    names). A change must leave the stored key's provider what it needs, of the fields it touches
    (a key saved before a rule existed can still be drained), and a new ``base_url`` must bring the
    secret: otherwise whoever may edit a key could point it at a server of their own and read the
    stored secret off the first request (400 key_required). The admin's form runs it before saving,
    so its page shows a refusal on its field."""
    if provider_key is None:
        return dict(validated(ProviderKeyCreateInputSerializer, data))
    values = dict(validated(ProviderKeyChangeInputSerializer, data, partial=True))
    missing = missing_settings(
        provider_key.provider,
        base_url=values.get("base_url", provider_key.base_url),
        api_version=values.get("api_version", provider_key.api_version),
    )
    touched = {field: [message] for field, message in missing.items() if field in values}
    if touched:
        raise invalid_fields(touched)
    if "base_url" in values and not values.get("key"):
        raise InvalidRequest(
            KEY_REQUIRED_MESSAGE, code="key_required", fields={"key": [KEY_REQUIRED_MESSAGE]}
        )
    return values


@transaction.atomic
def provider_key_create(*, organization: Organization, data: Mapping) -> ProviderKey:
    """A new key from ``data`` (the API's body, ``provider_key_check``), active, its secret stored
    encrypted (only its last four characters are ever shown)."""
    values = provider_key_check(data=data)
    secret = values.pop("key")
    provider_key = ProviderKey(organization=organization, **values)
    provider_key.set_secret(secret)
    provider_key.save()
    bump_generation(organization.id)
    return provider_key


@transaction.atomic
def provider_key_update(*, provider_key: ProviderKey, data: Mapping) -> ProviderKey:
    """Applies ``data`` (any of the fields, as the API's PATCH body has them: ``provider_key_check``);
    a ``key``, which comes with a new ``base_url``, also rotates the key."""
    changes = provider_key_check(data=data, provider_key=provider_key)
    secret = changes.pop("key", None)
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
def provider_key_rotate(*, provider_key: ProviderKey, data: Mapping) -> ProviderKey:
    """Replaces the secret in place with ``data``'s ``key`` (the API's rotate body; without one, 400
    replacement_required: the gateway cannot ask a provider for a new key). The key keeps its id,
    weight and region, so routing never has a gap. Requests already in flight finish with the secret
    they started with; no request that starts after this commits uses the old one
    (apps/core/generations.py)."""
    if not isinstance(data, Mapping) or "key" not in data:
        raise InvalidRequest(REPLACEMENT_REQUIRED_MESSAGE, code="replacement_required")
    secret = validated(ProviderKeyRotateInputSerializer, data)["key"]
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
