from collections.abc import Iterable, Mapping
from datetime import datetime
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.core.errors import invalid_fields
from apps.core.generations import bump_generation
from apps.core.model_patterns import checked_model_patterns
from apps.events.models import EventType
from apps.events.publish import raise_event_on_commit
from apps.limits.services import UNSET, limits_set
from apps.organizations.models import Organization
from apps.teams.models import Team

from . import revocation
from .models import ApiKey, Permission
from .secrets import api_key_digest, api_key_prefix, generate_api_key

KEY_WARNING = (
    "Store this key securely: it is shown only once and cannot be recovered. "
    "If it is lost, revoke it and create a new one."
)


def api_key_create(
    *,
    organization: Organization,
    name: str,
    permissions: Iterable[str] = (Permission.LLM,),
    team: Team | None = None,
    expires_at: datetime | None = None,
    allowed_data_regions: Iterable[str] = (),
    allowed_models: Iterable[str] | None = (),
    created_by: User | None = None,
    budget=UNSET,
    rate_limits=UNSET,
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with its secret, the only time the secret exists in clear.
    ``budget`` and ``rate_limits`` as ``limits_set`` takes them, in the key's transaction: a refused
    budget creates no key. ``allowed_models``: the models the key may call, within its team's and
    organization's (apps/core/model_patterns.py); empty for any."""
    api_key_check(organization=organization, team=team, expires_at=expires_at)
    allowed_models = checked_model_patterns(allowed_models)
    api_key = ApiKey(
        organization=organization,
        team=team,
        name=name,
        permissions=sorted(set(permissions)),
        expires_at=expires_at,
        allowed_data_regions=sorted(set(allowed_data_regions)),
        allowed_models=allowed_models,
        created_by=created_by,
    )
    secret = api_key_issue_secret(api_key=api_key)
    with transaction.atomic():
        api_key.save()
        limits_set(organization=organization, api_key=api_key, budget=budget, rate_limits=rate_limits)
        raise_event_on_commit(organization.id, EventType.API_KEY_CREATED, _event_data(api_key))
    return api_key, secret


def api_key_check(
    *, organization: Organization, team: Team | None = None, expires_at: datetime | None = None
) -> None:
    """The rules of a key's fields beyond their types, in one place for every way in (the API, the
    admin's form, the console): the team is the organization's, the expiry in the future. Raises
    ``InvalidRequest`` naming each field at fault (``team_id``, ``expires_at``)."""
    errors = {}
    if team is not None and team.organization_id != organization.id:
        errors["team_id"] = ["This team belongs to another organization."]
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = ["Must be in the future."]
    if errors:
        raise invalid_fields(errors)


def _event_data(api_key: ApiKey) -> dict:
    """What the api_key.* events say of a key: never its secret or digest."""
    return {
        "api_key_id": str(api_key.id),
        "name": api_key.name,
        "key_prefix": api_key.key_prefix,
        "team_id": str(api_key.team_id) if api_key.team_id else None,
    }


# What a key's owner may change; its secret, organization, team and permissions stay what they were.
UPDATABLE_FIELDS = ("name", "expires_at", "allowed_data_regions", "allowed_models")


def api_key_update(*, api_key: ApiKey, budget=UNSET, rate_limits=UNSET, **changes) -> ApiKey:
    """Changes a key's name, expiry (in the future, or None for never), allowed regions or models, and its
    budget and rate limits, in one transaction; bumps the generation, so every proxy worker reads
    the key and its limits again for its next request."""
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise TypeError(f"Not changeable: {', '.join(sorted(unknown))}")
    api_key_check(organization=api_key.organization, expires_at=changes.get("expires_at"))
    if "allowed_data_regions" in changes:
        changes["allowed_data_regions"] = sorted(set(changes["allowed_data_regions"]))
    if "allowed_models" in changes:
        changes["allowed_models"] = checked_model_patterns(changes["allowed_models"])
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
