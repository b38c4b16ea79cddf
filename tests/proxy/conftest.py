import httpx
import pytest
from channels.db import database_sync_to_async

from apps.catalog import services as catalog_services
from apps.providers import services as provider_services
from apps.proxy.runtime import runtime
from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application
from tests import upstreams

# The loopback provider stand-ins (tests/upstreams.py), bound here so every proxy test finds them.
upstream = upstreams.upstream
make_upstream = upstreams.make_upstream


@pytest.fixture(autouse=True)
def _fresh_routing_state():
    """Routing state lives in the process; no test may inherit another's."""
    runtime.reset()
    yield
    runtime.reset()
    # The audit writer must finish with this test's rows before the next test empties the database.
    from apps.outbox.outbox import outbox

    outbox().flush()


@pytest.fixture
async def proxy():
    """An HTTP client for the gateway's ASGI application, in this process."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application, client=("203.0.113.7", 5000)),
        base_url="http://gateway",
        timeout=30,
    ) as client:
        yield client
    await close_sessions()  # the upstream session belongs to this test's event loop


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def add_provider_key(organization, server, *, provider: str = "openai", secret: str | None = None, **fields):
    """A provider key of ``organization`` that points at the loopback ``server``."""
    base_url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    if provider == "azure_openai":
        base_url = server.base_url
        fields.setdefault("api_version", "2024-10-21")
    fields.setdefault("data_region", "us")
    return provider_services.provider_key_create(
        organization=organization,
        data={
            "provider": provider,
            "key": secret or f"sk-upstream-{server.name}-{provider}",
            "base_url": base_url,
            **fields,
        },
    )


def add_alias(organization, alias: str, *deployments: tuple[str, str], fallbacks=()):
    return catalog_services.model_alias_create(
        organization=organization,
        data={
            "alias": alias,
            "deployments": [{"provider": p, "upstream_model": m} for p, m in deployments],
            "fallbacks": list(fallbacks),
        },
    )


add_provider_key_async = database_sync_to_async(add_provider_key)
add_alias_async = database_sync_to_async(add_alias)


@pytest.fixture
def records():
    """Every request record the proxy hands to the audit log during the test."""
    from apps.audit.records import on_record, remove_listener

    seen: list = []
    listener = on_record(seen.append)
    yield seen
    remove_listener(listener)


@pytest.fixture
async def gateway_key(organization):
    """(ApiKey, secret) of ``organization``."""
    from tests.factories import create_api_key

    return await database_sync_to_async(create_api_key)(organization)


@pytest.fixture
async def sdk(gateway_key):
    """The official async OpenAI SDK, pointed at the gateway's ASGI app in this process."""
    import openai

    http_client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application, client=("203.0.113.7", 5000)), timeout=30
    )
    async with openai.AsyncOpenAI(
        api_key=gateway_key[1], base_url="http://gateway/v1", http_client=http_client, max_retries=0
    ) as client:
        yield client
    await close_sessions()


@pytest.fixture
async def routed(organization, upstream):
    """``organization`` routes the alias ``fast`` to the loopback ``upstream``."""
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return upstream


async def entries():
    """Every audit entry so far, oldest first, once the outbox has written what was spooled."""
    from apps.audit.models import AuditEntry
    from apps.outbox.outbox import outbox

    assert outbox().flush()
    return [entry async for entry in AuditEntry.objects.order_by("created_at")]


class FakeClock:
    """A monotonic clock a test moves by hand (``clock.now += 61``): time-based behaviour without sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
