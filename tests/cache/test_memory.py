"""L1: this process's LRU, bounded in entries and bytes, emptied by a new generation, expiring."""

import pytest

from apps.cache.memory import ENTRY_OVERHEAD_BYTES, LocalCache
from tests.cache.conftest import cached, completion


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def sized(size: int):
    """An answer whose entry costs exactly ``size`` bytes under a 1-character key."""
    return cached(b"x" * (size - ENTRY_OVERHEAD_BYTES - 1))


def test_a_stored_answer_is_served_under_its_generation(clock, answer):
    cache = LocalCache(clock=clock)

    assert cache.get("k", 3) is None
    assert cache.put("k", 3, answer, 60)
    assert cache.get("k", 3) is answer


def test_an_entry_of_an_older_generation_is_a_miss_and_is_dropped(clock, answer):
    cache = LocalCache(clock=clock)
    cache.put("k", 3, answer, 60)

    assert cache.get("k", 4) is None
    assert len(cache) == 0
    assert cache.size_bytes == 0
    assert cache.get("k", 3) is None


def test_an_entry_expires_after_its_ttl(clock, answer):
    cache = LocalCache(clock=clock)
    cache.put("k", 1, answer, 60)

    clock.now += 59.9
    assert cache.get("k", 1) is answer
    clock.now += 0.1
    assert cache.get("k", 1) is None
    assert len(cache) == 0


def test_the_least_recently_used_entry_goes_first_when_entries_are_full(clock, answer):
    cache = LocalCache(max_entries=3, clock=clock)
    for key in "abc":
        cache.put(key, 1, answer, 60)
    cache.get("a", 1)  # a is now the most recent

    cache.put("d", 1, answer, 60)

    assert [key for key in "abcd" if cache.get(key, 1) is not None] == ["a", "c", "d"]
    assert len(cache) == 3


def test_bytes_are_bounded_too(clock):
    cache = LocalCache(max_entries=100, max_bytes=3000, max_entry_bytes=2000, clock=clock)
    for key in "abc":
        assert cache.put(key, 1, sized(1000), 60)
    assert cache.size_bytes == 3000

    cache.put("d", 1, sized(1500), 60)  # a and b go to make room

    assert cache.size_bytes == 2500
    assert [key for key in "abcd" if cache.get(key, 1) is not None] == ["c", "d"]


def test_an_answer_larger_than_an_entry_may_be_is_not_kept(clock):
    cache = LocalCache(max_entries=100, max_bytes=10_000, max_entry_bytes=2000, clock=clock)
    cache.put("small", 1, sized(500), 60)

    assert not cache.put("big", 1, sized(2001), 60)
    assert cache.get("big", 1) is None
    assert cache.get("small", 1) is not None


def test_replacing_an_entry_keeps_the_byte_count_right(clock):
    cache = LocalCache(max_entries=10, max_bytes=10_000, max_entry_bytes=5000, clock=clock)
    cache.put("a", 1, sized(1000), 60)
    cache.put("a", 2, sized(3000), 60)

    assert (len(cache), cache.size_bytes) == (1, 3000)
    assert cache.get("a", 1) is None


def test_a_cache_sized_to_nothing_keeps_nothing(clock, answer):
    cache = LocalCache(max_entries=0, clock=clock)

    assert not cache.put("k", 1, answer, 60)
    assert cache.get("k", 1) is None


def test_the_default_bounds_are_the_settings(settings):
    cache = LocalCache()

    assert (cache.max_entries, cache.max_bytes, cache.max_entry_bytes) == (
        settings.GATEWAY_CACHE_L1_MAX_ENTRIES,
        settings.GATEWAY_CACHE_L1_MAX_BYTES,
        settings.GATEWAY_CACHE_MAX_ENTRY_BYTES,
    )


def test_ten_thousand_entries_stay_within_bounds(clock):
    cache = LocalCache(max_entries=1000, max_bytes=1_000_000, clock=clock)
    answer = cached(completion())
    for number in range(10_000):
        cache.put(f"key-{number}", 1, answer, 60)

    assert len(cache) <= 1000
    assert cache.size_bytes <= 1_000_000
    assert cache.get("key-9999", 1) is answer
    assert cache.get("key-0", 1) is None
