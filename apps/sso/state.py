"""Sign-in state kept on the server for a sign-in started through the API.

``POST /api/v1/auth/sso/initiate`` has no browser session to keep the OAuth ``state`` in (its caller
is a script, or a page on another origin), so the state, with the PKCE verifier and the nonce, is kept
in the cache under the random ``state`` value for the same 10 minutes as allauth's session states,
and the callback takes it from there when its browser session has none. Taking it is one-time: a
second callback with the same ``state`` (a replay, or two racing) finds nothing.

Such a callback is not tied to the browser that opens it: someone could start a sign-in through the
API, sign in at the identity provider as themselves and send the callback's address to someone else,
whose browser would then be signed in to the sender's organization (login CSRF). So the callback of a
sign-in started through the API asks the browser to confirm first (apps/sso/views.py), naming the
organization; a sign-in started on the console's page is tied to its browser's session and is not asked.
"""

import re
import secrets
import time

from allauth.socialaccount.internal.statekit import STATE_TTL
from django.core.cache import cache

_STATE_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def _key(state_id: str) -> str:
    return f"sso:state:{state_id}"


def stash(state: dict, *, provider_id: str, state_id: str | None = None) -> str:
    """Keeps ``state`` under a new random id, or under ``state_id`` (a SAML AuthnRequest's id,
    which the response names in InResponseTo)."""
    state_id = state_id or secrets.token_urlsafe(32)
    cache.set(_key(state_id), {"state": state, "provider_id": provider_id, "at": time.time()}, STATE_TTL)
    return state_id


def waiting(state_id: str | None, *, provider_id: str) -> bool:
    """Whether a state stashed for this connection waits under ``state_id`` (not taken, not expired),
    without taking it."""
    if not state_id or not _STATE_ID.fullmatch(state_id):
        return False
    entry = cache.get(_key(state_id))
    return (
        isinstance(entry, dict)
        and entry.get("provider_id") == provider_id
        and time.time() - entry.get("at", 0) <= STATE_TTL
        and cache.get(f"sso:state-taken:{state_id}") is None
    )


def take(state_id: str | None, *, provider_id: str) -> dict | None:
    """The state stashed under ``state_id`` for this connection, once; None when there is none, it
    expired, it belongs to another connection, or it was taken already."""
    if not state_id or not _STATE_ID.fullmatch(state_id):
        return None
    entry = cache.get(_key(state_id))
    if not isinstance(entry, dict) or entry.get("provider_id") != provider_id:
        return None
    if time.time() - entry.get("at", 0) > STATE_TTL:
        return None
    # add() is atomic in every cache backend: of two callbacks racing with one state, one wins.
    if not cache.add(f"sso:state-taken:{state_id}", 1, STATE_TTL):
        return None
    cache.delete(_key(state_id))
    return entry["state"]
