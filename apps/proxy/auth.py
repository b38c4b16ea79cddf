"""API-key authentication for the proxy, without a database read on the usual request.

Looked-up keys are held in this worker's memory for ``GATEWAY_KEY_CACHE_SECONDS``; revocation
does not wait for that (``apps/keys/revocation.py``), and expiry is checked against the clock on
every request.

While the database is unreachable (``apps/core/database.py``), a key whose copy has expired is
served from that last good copy for ``GATEWAY_KEY_OUTAGE_SECONDS`` more: nothing about a key can
change while nobody can write it, and revocation (Redis) and expiry (the clock) are still checked
on every request. A key this worker holds no copy of cannot be checked: 503 ``database_unavailable``,
at once while the outage is known, never a 401 (it may be valid) nor a 500.
"""

import asyncio
import contextvars
import functools
import hmac
import time
from dataclasses import dataclass
from datetime import datetime

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from apps.core.database import UNREACHABLE_ERRORS, DatabaseUnavailable, outage
from apps.core.errors import AuthenticationFailed, PermissionDenied
from apps.core.model_patterns import ModelAllowList
from apps.keys import selectors
from apps.keys.secrets import api_key_digest

from .runtime import runtime

# Unknown secrets are remembered briefly too, so garbage keys cannot make every request a read.
_NEGATIVE_SECONDS = 5.0
_MAX_ENTRIES = 100_000


@dataclass(frozen=True, slots=True)
class AuthenticatedKey:
    id: str
    organization_id: str
    team_id: str | None
    key_prefix: str
    permissions: frozenset[str]
    allowed_data_regions: frozenset[str]
    expires_at: datetime | None
    # The models the key may call, compiled when the key is read; None: no restriction of its own.
    allowed_models: ModelAllowList | None = None


class ApiKeyCache:
    def __init__(self) -> None:
        # digest -> (key or None when unknown/revoked, monotonic time it was read)
        self._entries: dict[str, tuple[AuthenticatedKey | None, float]] = {}
        self._digest_by_id: dict[str, str] = {}
        # Moved on by every forget: a read that began before one (a key changed or revoked since)
        # answers the requests that were waiting for it but is not kept (``put``'s ``read_since``).
        self.epoch = 0

    def get(self, digest: str) -> tuple[bool, AuthenticatedKey | None]:
        entry = self._entries.get(digest)
        if entry is None:
            return False, None
        key, read_at = entry
        ttl = settings.GATEWAY_KEY_CACHE_SECONDS if key is not None else _NEGATIVE_SECONDS
        if time.monotonic() - read_at > ttl:
            return False, None
        return True, key

    def last_good(self, digest: str) -> AuthenticatedKey | None:
        """The key as last read, while that is at most GATEWAY_KEY_OUTAGE_SECONDS past its cache
        time; a key read as unknown is not kept for this (it may have been made since)."""
        entry = self._entries.get(digest)
        if entry is None or entry[0] is None:
            return None
        key, read_at = entry
        kept = settings.GATEWAY_KEY_CACHE_SECONDS + settings.GATEWAY_KEY_OUTAGE_SECONDS
        return key if time.monotonic() - read_at <= kept else None

    def put(self, digest: str, key: AuthenticatedKey | None, read_since: int | None = None) -> None:
        if read_since is not None and read_since != self.epoch:
            return
        if len(self._entries) >= _MAX_ENTRIES:
            self.clear()
        self._entries[digest] = (key, time.monotonic())
        if key is not None:
            self._digest_by_id[key.id] = digest

    def forget(self, key_id: str) -> None:
        self._forgotten()
        digest = self._digest_by_id.pop(key_id, None)
        if digest is not None:
            self._entries.pop(digest, None)

    def forget_organization(self, organization_id: str) -> None:
        """Drops the organization's keys: a changed configuration may have changed a key too (its
        regions, its expiry), and a key is re-read with the configuration."""
        self._forgotten()  # also a key whose first read is still in flight
        for key, _ in list(self._entries.values()):
            if key is not None and key.organization_id == organization_id:
                self.forget(key.id)

    def clear(self) -> None:
        self._forgotten()
        self._entries.clear()
        self._digest_by_id.clear()

    def _forgotten(self) -> None:
        # The next request reads the key again rather than join a read that began before.
        self.epoch += 1
        _reads_in_flight.clear()


def forget_revoked(key_id: str) -> None:
    """A key revoked in this process leaves its key cache at once (registered by ``ProxyConfig.ready``)."""
    if runtime.started:
        runtime.keys.forget(key_id)


class KeyRefused(AuthenticationFailed):
    pass


def bearer_token(headers: dict[str, str]) -> str:
    """The API key: ``Authorization: Bearer <key>``, or ``x-api-key: <key>`` as the Anthropic SDK
    sends it (a request with both is read by its Authorization)."""
    authorization = headers.get("authorization")
    if not authorization and (api_key := headers.get("x-api-key", "").strip()):
        authorization = f"Bearer {api_key}"
    if not authorization:
        raise KeyRefused(
            "No API key provided. Send it as 'Authorization: Bearer <API key>' (or 'x-api-key: <API key>').",
            code="missing_api_key",
        )
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise KeyRefused(
            "The Authorization header must be 'Bearer <API key>'.", code="invalid_authorization_header"
        )
    if token.count(".") == 2 and token.startswith("eyJ"):
        raise KeyRefused(
            "Session tokens are for the management API (/api/v1/); the proxy takes an API key.",
            code="session_token_not_accepted",
        )
    return token


def _load_key(digest: str) -> AuthenticatedKey | None:
    api_key = selectors.api_key_by_digest(digest)
    if api_key is None or not hmac.compare_digest(api_key.key_digest, digest) or not api_key.is_active:
        return None
    return AuthenticatedKey(
        id=str(api_key.id),
        organization_id=str(api_key.organization_id),
        team_id=str(api_key.team_id) if api_key.team_id else None,
        key_prefix=api_key.key_prefix,
        permissions=frozenset(api_key.permissions),
        allowed_data_regions=frozenset(api_key.allowed_data_regions or ()),
        expires_at=api_key.expires_at,
        allowed_models=ModelAllowList.of(api_key.allowed_models),
    )


_load_key_async = database_sync_to_async(_load_key)


async def _read_key(digest: str) -> AuthenticatedKey | None:
    # A known outage is not sent to the database thread: calls there run one at a time, and each
    # would wait for the breaker's probe or the pool.
    if not outage.known():
        epoch = runtime.keys.epoch
        try:
            key = await _load_key_async(digest)
        except UNREACHABLE_ERRORS:
            pass
        else:
            runtime.keys.put(digest, key, read_since=epoch)
            return key
    key = runtime.keys.last_good(digest)
    if key is None:
        raise DatabaseUnavailable(
            "The gateway cannot check this API key now: its database is unreachable. Retry shortly."
        )
    return key


# The reads in flight, by digest: the requests that find a key's cache entry expired at the same
# moment (every connection of a busy client, once a minute) share one database read. Each read
# queued its own on the one database thread, and 32 of them in a row were the worst stalls under
# load (docs/benchmarks.md, "Issue 23").
_reads_in_flight: dict[str, asyncio.Task] = {}


async def _read_key_once(digest: str) -> AuthenticatedKey | None:
    loop = asyncio.get_running_loop()
    read = _reads_in_flight.get(digest)
    if read is None or read.get_loop() is not loop:
        read = loop.create_task(_read_key(digest), context=contextvars.Context())
        _reads_in_flight[digest] = read
        read.add_done_callback(functools.partial(_read_done, digest))
    # Shielded: a client that leaves cancels its own wait, not the read the others wait for.
    return await asyncio.shield(read)


def _read_done(digest: str, read: asyncio.Task) -> None:
    if _reads_in_flight.get(digest) is read:
        del _reads_in_flight[digest]
    if not read.cancelled():
        read.exception()  # retrieved: every waiter may have left, and asyncio would log it


async def authenticate(headers: dict[str, str]) -> AuthenticatedKey:
    """The key, from this worker's memory when it was looked up lately. Whether it has been revoked
    since is read with the request's admission (admission.py), in its one Redis round trip."""
    token = bearer_token(headers)
    digest = api_key_digest(token)
    cached, key = runtime.keys.get(digest)
    if not cached:
        key = await _read_key_once(digest)
    if key is None:
        raise KeyRefused("Invalid API key, or the key has been revoked.", code="invalid_api_key")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise KeyRefused("This API key has expired.", code="api_key_expired")
    return key


def require_permission(key: AuthenticatedKey, accepted: frozenset[str]) -> None:
    if key.permissions.isdisjoint(accepted):
        needed = " or ".join(sorted(accepted))
        raise PermissionDenied(
            f"This API key does not have the {needed} permission.", code="permission_denied"
        )
