from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.core.errors import invalid_field
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns
from apps.events.models import EventType
from apps.events.publish import raise_event_on_commit
from apps.limits.services import UNSET, limits_set
from apps.organizations.models import Organization
from apps.teams.selectors import team_ids_of

from . import revocation
from .models import ApiKey, Permission
from .secrets import api_key_digest, api_key_prefix, generate_api_key

KEY_WARNING = (
    "Store this key securely: it is shown only once and cannot be recovered. "
    "If it is lost, revoke it and create a new one."
)


def api_key_check(*, organization: Organization, data: Mapping, partial: bool = False) -> dict[str, Any]:
    """``data`` (the API's body, inputs.py: a new key's ``ApiKeyInputSerializer``; ``partial``, a
    change's ``ApiKeyChangeInputSerializer``, only the fields it names) as the key stores it, for every
    way in (the API, the admin's form, the console): the team one of ``organization``'s (read as
    ``team``), the expiry in the future, the regions sorted and each once, the model patterns checked
    (apps/core/model_patterns.py). Raises ``InvalidRequest`` naming each field at fault (``team_id``,
    ``expires_at``). The budget and rate limits are parsed here with the limits' fields; their rules
    are ``limits_set``'s."""
    # The input serializers (DRF) load on a key's first write, not in a server process that only
    # proxies: it imports this module for ``api_keys_mark_used``.
    from apps.core.api.serializers import validated

    from .inputs import ApiKeyChangeInputSerializer, ApiKeyInputSerializer

    serializer = ApiKeyChangeInputSerializer if partial else ApiKeyInputSerializer
    values = dict(validated(serializer, data, partial=partial, context={"organization": organization}))
    expires_at = values.get("expires_at")
    if expires_at is not None and expires_at <= timezone.now():
        raise invalid_field("expires_at", "Must be in the future.")
    if "permissions" in values:
        values["permissions"] = sorted(set(values["permissions"]))
    if "allowed_data_regions" in values:
        values["allowed_data_regions"] = sorted(set(values["allowed_data_regions"]))
    if "allowed_models" in values:
        values["allowed_models"] = checked_model_patterns(values["allowed_models"])
    return values


def api_key_create(
    *, organization: Organization, data: Mapping, created_by: User | None = None
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with its secret, the only time the secret exists in clear.
    ``data``: the API's body (``api_key_check``); ``budget`` and ``rate_limits`` are set in the key's
    transaction (``limits_set``): a refused budget creates no key. ``allowed_models``: the models the
    key may call, within its team's and organization's; empty for any."""
    values = api_key_check(organization=organization, data=data)
    budget, rate_limits = values.pop("budget", UNSET), values.pop("rate_limits", UNSET)
    api_key = ApiKey(organization=organization, created_by=created_by, **values)
    secret = api_key_issue_secret(api_key=api_key)
    with transaction.atomic():
        api_key.save()
        limits_set(organization=organization, api_key=api_key, budget=budget, rate_limits=rate_limits)
        raise_event_on_commit(organization.id, EventType.API_KEY_CREATED, _event_data(api_key))
    return api_key, secret


# The console's playground sends requests from the browser, which needs a secret the gateway never keeps:
# it makes one of these for the signed-in person. Chat completions only, and short: it ends by itself.
PLAYGROUND_KEY_LIFETIME = timedelta(minutes=15)
PLAYGROUND_KEY_NAME = "Playground · {email}"  # a list shows whose it is and where it came from


def playground_key_create(
    *, organization: Organization, user: User, team_id: str | None = None
) -> tuple[ApiKey, str]:
    """A key for ``user`` to try models with in the console's playground, made by ``api_key_create``
    like every key: ``proxy:chat`` only, expiring after ``PLAYGROUND_KEY_LIFETIME`` (the proxy refuses
    it once expired; the person's next one revokes it then), charged to ``team_id``, which must be one
    of the organization's teams ``user`` belongs to (None: the organization). Raises
    ``InvalidRequest`` on ``team_id`` for any other team, another organization's included."""
    if team_id is not None and str(team_id) not in {
        str(own) for own in team_ids_of(user=user, organization_id=organization.id)
    }:
        raise invalid_field("team_id", "Choose one of your own teams, or none.")
    from .inputs import NAME_LENGTH  # DRF's serializers load on a write (api_key_check says why)

    name = PLAYGROUND_KEY_NAME.format(email=user.email)[:NAME_LENGTH]
    with transaction.atomic():
        # The person's playground keys that have expired end here, so they do not pile up active in
        # the key lists and pickers; a live one (another tab's) keeps working until it expires.
        expired = ApiKey.objects.filter(
            organization=organization,
            created_by=user,
            name=name,
            is_active=True,
            expires_at__lte=timezone.now(),
        )
        for api_key in expired:
            api_key_revoke(api_key=api_key)
        return api_key_create(
            organization=organization,
            created_by=user,
            data={
                "name": name,
                "permissions": [Permission.CHAT.value],
                "team_id": None if team_id is None else str(team_id),
                "expires_at": timezone.now() + PLAYGROUND_KEY_LIFETIME,
            },
        )


def _event_data(api_key: ApiKey) -> dict:
    """What the api_key.* events say of a key: never its secret or digest."""
    return {
        "api_key_id": str(api_key.id),
        "name": api_key.name,
        "key_prefix": api_key.key_prefix,
        "team_id": str(api_key.team_id) if api_key.team_id else None,
    }


def api_key_update(*, api_key: ApiKey, data: Mapping) -> ApiKey:
    """Changes a key's name, expiry (in the future, or None for never), allowed regions or models, and
    its budget and rate limits, as the API's PATCH body names them (``api_key_check``, partial; its
    secret, organization, team and permissions stay what they were), in one transaction; bumps the
    generation, so every proxy worker reads the key and its limits again for its next request."""
    changes = api_key_check(organization=api_key.organization, data=data, partial=True)
    budget, rate_limits = changes.pop("budget", UNSET), changes.pop("rate_limits", UNSET)
    for field, value in changes.items():
        setattr(api_key, field, value)
    with transaction.atomic():
        if changes:
            api_key.save(update_fields=list(changes))
        limits_set(organization=api_key.organization, api_key=api_key, budget=budget, rate_limits=rate_limits)
        bump_generation(api_key.organization_id)
    return api_key


def api_key_issue_secret(*, api_key: ApiKey) -> str:
    """Gives an unsaved key its secret: keeps the prefix and digest, returns the secret to show once."""
    secret = generate_api_key()
    api_key.key_prefix = api_key_prefix(secret)
    api_key.key_digest = api_key_digest(secret)
    return secret


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    """Revokes a key; revoking a revoked key changes nothing. Requests already in flight finish;
    every worker refuses the key from its next request on (see revocation.py)."""
    if not api_key.is_active:
        return api_key
    api_key.is_active = False
    api_key.revoked_at = timezone.now()
    api_key.save(update_fields=["is_active", "revoked_at"])
    key_id = str(api_key.id)
    transaction.on_commit(lambda: revocation.announce_revoked(key_id))
    raise_event_on_commit(api_key.organization_id, EventType.API_KEY_REVOKED, _event_data(api_key))
    return api_key


def api_keys_mark_used(*, last_used: Mapping[UUID | str, datetime]) -> None:
    """Records when keys were last used; called off the request, in batches."""
    if not last_used:
        return
    keys = list(ApiKey.objects.filter(id__in=list(last_used)).only("id", "last_used_at"))
    for api_key in keys:
        api_key.last_used_at = last_used.get(api_key.id) or last_used.get(str(api_key.id))
    ApiKey.objects.bulk_update(keys, ["last_used_at"])
