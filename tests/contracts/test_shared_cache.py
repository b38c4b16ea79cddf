"""The cache's shared tier's contract (``apps.cache.shared.SharedTier``): ``SharedCache`` in Redis
and ``NoSharedTier`` in the embedded default (whose one process shares its L1) keep the same
promises: a put that says it stored is read back until it expires, one that says it did not is a
miss, and each organization's purge epoch moves alone."""

import asyncio
import uuid

import pytest

from apps.cache import shared
from apps.cache.keys import entry_key
from apps.cache.shared import NoSharedTier, SharedCache, SharedTier, epoch_key
from apps.core.redis import redis_key, sync_client
from tests.cache.conftest import cached

from .conftest import IMPLEMENTATIONS, assert_conforms


@pytest.fixture(params=IMPLEMENTATIONS)
def tier(request):
    organizations = []
    if request.param == "embedded":
        yield NoSharedTier(), organizations
        return
    yield SharedCache(), organizations
    for organization_id in organizations:
        sync_client().delete(epoch_key(organization_id))


def key() -> str:
    return redis_key("contract-test", uuid.uuid4().hex)


@pytest.mark.parametrize("implementation", [NoSharedTier, SharedCache])
def test_each_implementation_has_the_protocols_methods_and_signatures(implementation):
    assert_conforms(implementation, SharedTier)


async def test_an_entry_stored_is_read_back_and_one_not_stored_is_a_miss(tier):
    cache, _ = tier
    entry, answer = key(), cached(b'{"id": "chatcmpl-1"}')
    stored = await cache.put(entry, answer, 60)
    assert await cache.get(entry) == (answer if stored else None)
    assert await cache.get(key()) is None


async def test_an_entry_larger_than_allowed_or_without_a_lifetime_is_not_stored(tier, settings):
    cache, _ = tier
    settings.GATEWAY_CACHE_MAX_ENTRY_BYTES = 2048
    too_large, no_lifetime = key(), key()
    assert await cache.put(too_large, cached(b"x" * 4096), 60) is False
    assert await cache.put(no_lifetime, cached(b"{}"), 0) is False
    assert await cache.get(too_large) is None
    assert await cache.get(no_lifetime) is None


async def test_an_entry_expires_with_its_lifetime(tier):
    cache, _ = tier
    entry = key()
    if not await cache.put(entry, cached(b"{}"), 1):
        assert await cache.get(entry) is None
        return
    await asyncio.sleep(1.1)  # Redis's own expiry: nothing to advance but the clock
    assert await cache.get(entry) is None


def test_a_purge_moves_the_epoch_of_its_organization_only(tier):
    cache, organizations = tier
    organization_id, other_id = uuid.uuid4(), uuid.uuid4()
    organizations += [organization_id, other_id]
    assert cache.epoch(organization_id) == 0  # nobody purged yet
    other = cache.epoch(other_id)
    new = cache.epoch_increment(organization_id)
    assert cache.epoch(organization_id) == new
    assert cache.epoch(other_id) == other


async def test_entries_stored_before_a_purge_are_out_of_reach_after_it(tier):
    cache, organizations = tier
    organization_id = uuid.uuid4()
    organizations.append(organization_id)
    answer = cached(b"{}")
    before = entry_key(
        organization_id, cache.epoch(organization_id), frozenset({"eu"}), "gpt-4o-mini", "fingerprint"
    )
    stored = await cache.put(before, answer, 60)
    new = cache.epoch_increment(organization_id)
    after = entry_key(organization_id, new, frozenset({"eu"}), "gpt-4o-mini", "fingerprint")
    assert (after != before) == stored  # an epoch that moves is a new partition
    assert await cache.get(after) is None


def test_the_deployment_chooses_once_by_redis_url(settings):
    settings.REDIS_URL = ""
    assert shared.shared_tier() is shared.no_shared_tier
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert shared.shared_tier() is shared.shared_cache
