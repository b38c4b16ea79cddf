"""How often a worker reads an organization's configuration: once for all the requests that need a new
copy at the same moment, never once per request. When only the copy's age ran out, the request that
finds it so reads it again and the others are served the copy held meanwhile; when the configuration
changed, they all wait for the one read of the new one."""

import asyncio

import pytest
from channels.db import database_sync_to_async

from apps.audit.models import AuditEntry
from apps.organizations import services as organization_services
from apps.outbox.outbox import outbox
from apps.proxy.runtime import runtime
from tests.proxy.conftest import FakeClock, add_alias_async, add_provider_key_async, bearer

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
CONCURRENT = 50
MAX_AGE = 60


class Reads:
    """Counts the reads of the configuration store (its ``load`` seam), each still the real read;
    ``hold()`` keeps the next read waiting until ``release()``."""

    def __init__(self, load) -> None:
        self.load = load
        self.count = 0
        self.started = asyncio.Event()
        self.finished = asyncio.Event()
        self._gate: asyncio.Event | None = None

    async def __call__(self, organization_id: str, generation: int):
        self.count += 1
        self.started.set()
        gate, self._gate = self._gate, None
        if gate is not None:
            await gate.wait()
        try:
            return await self.load(organization_id, generation)
        finally:
            self.finished.set()

    def hold(self) -> None:
        self._gate = asyncio.Event()
        self._held = self._gate

    def release(self) -> None:
        self._held.set()


@pytest.fixture
def clock(settings):
    settings.GATEWAY_CONFIG_MAX_AGE_SECONDS = MAX_AGE
    fake = FakeClock()
    real, runtime.configs.clock = runtime.configs.clock, fake
    yield fake
    runtime.configs.clock = real


@pytest.fixture
def reads():
    counting = Reads(runtime.configs.load)
    real, runtime.configs.load = runtime.configs.load, counting
    yield counting
    runtime.configs.load = real


@pytest.fixture
async def routed(organization, upstream, gateway_key):
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    return gateway_key[1]


async def chat(proxy, secret: str) -> str:
    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
    assert response.status_code == 200, response.text
    return response.headers["x-gateway-request-id"]


async def body_modes(request_ids: list[str]) -> list[str]:
    assert outbox().flush()
    modes = {str(e.id): e.body_mode async for e in AuditEntry.objects.filter(id__in=request_ids)}
    return [modes[request_id] for request_id in request_ids]


async def update_organization(organization, **changes) -> None:
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data=changes
    )


async def test_requests_that_find_the_copy_too_old_start_one_read_between_them(proxy, routed, clock, reads):
    await chat(proxy, routed)
    assert reads.count == 1
    reads.finished.clear()

    clock.now += MAX_AGE + 1
    await asyncio.gather(*(chat(proxy, routed) for _ in range(CONCURRENT)))
    await asyncio.wait_for(reads.finished.wait(), 10)

    assert reads.count == 2
    await chat(proxy, routed)  # the copy read again is the one held now
    assert reads.count == 2


async def test_requests_after_a_change_wait_for_one_read_of_the_new_configuration(
    proxy, organization, routed, clock, reads
):
    await update_organization(organization, log_bodies="full")
    first = await chat(proxy, routed)
    await update_organization(organization, log_bodies="metadata")

    after = await asyncio.gather(*(chat(proxy, routed) for _ in range(CONCURRENT)))

    assert reads.count == 2
    assert await body_modes([first, *after]) == ["full"] + ["metadata"] * CONCURRENT


async def test_a_change_made_while_an_old_copy_is_read_again_is_never_served_stale(
    proxy, organization, routed, clock, reads
):
    await update_organization(organization, log_bodies="full")
    first = await chat(proxy, routed)
    clock.now += MAX_AGE + 1
    reads.hold()  # the read that the next request starts stays under way
    reads.started.clear()
    reading = asyncio.create_task(chat(proxy, routed))
    await asyncio.wait_for(reads.started.wait(), 10)

    served_while_reading = await asyncio.wait_for(chat(proxy, routed), 10)  # the copy held
    await update_organization(organization, log_bodies="metadata")
    # Neither the copy held nor the read of the old generation that is still under way.
    after_the_change = await asyncio.wait_for(chat(proxy, routed), 10)
    reads.release()
    await reading

    assert reads.count == 3
    assert await body_modes([first, served_while_reading, after_the_change]) == ["full", "full", "metadata"]


async def test_an_organization_deleted_while_its_copy_is_held_is_not_served_once_the_copy_is_too_old(
    proxy, organization, routed, clock, reads
):
    await chat(proxy, routed)
    await organization.adelete()  # around the services: nothing bumps the generation
    clock.now += MAX_AGE + 1
    reads.finished.clear()

    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(routed))  # starts the read
    await asyncio.wait_for(reads.finished.wait(), 10)
    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(routed))

    # 404 while the API key is still in the worker's key cache, 401 after: either way, not served.
    assert response.status_code in (401, 404), response.text
