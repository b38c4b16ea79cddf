"""Who is calling, and with which configuration: the one place a request's API key is authenticated
(auth.py) and its organization's configuration loaded (config.py).

app.py identifies the caller before anything else (the permission, then the body, are checked
against the key) and gives the pipeline a ``Caller``; when admission finds the configuration
changed, the pipeline asks for the caller again with the newer one (``reconfigured``), and the key
is read again with it: an update of the key (its regions, its expiry, its team) bumped the same
generation.
"""

from dataclasses import dataclass

from apps.core.database import outage

from .admission import current_generation
from .auth import AuthenticatedKey, authenticate
from .config import OrganizationConfig, load_config
from .http import ProxyRequest
from .runtime import runtime


@dataclass(frozen=True, slots=True)
class Caller:
    key: AuthenticatedKey
    config: OrganizationConfig


async def identified(request: ProxyRequest) -> AuthenticatedKey:
    """The request's API key, written on its record."""
    key = await authenticate(request.headers)
    record = request.record
    record.organization_id, record.api_key_id, record.api_key_prefix = (
        key.organization_id,
        key.id,
        key.key_prefix,
    )
    record.team_id = key.team_id
    return key


async def configured(request: ProxyRequest, key: AuthenticatedKey) -> Caller:
    """The key with its organization's configuration: the copy this worker holds, whose generation
    admission checks. The first request of an organization in this process asks for the generation
    first, so the copy is read once."""
    generation = None
    if not runtime.configs.holds(key.organization_id):
        generation = await current_generation(key)
    config = await load_config(key.organization_id, generation)
    request.record.log_bodies = config.log_bodies
    return Caller(key, config)


async def reconfigured(request: ProxyRequest, caller: Caller, generation: int) -> Caller:
    """The caller with the configuration at ``generation``, and the key read again with it. Not while
    the database is away: the keys held are then the last good copies, and nothing could read them
    again."""
    organization_id = caller.key.organization_id
    config = await load_config(organization_id, generation)
    request.record.log_bodies = config.log_bodies
    key = caller.key
    if not outage.known():
        runtime.keys.forget_organization(organization_id)
        key = await authenticate(request.headers)
    return Caller(key, config)
