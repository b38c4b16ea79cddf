"""L3: the nearest earlier prompt of the same organization and model, above the threshold."""

from datetime import timedelta

import numpy as np
import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from apps.cache.models import SemanticEntry
from apps.cache.semantic import MAX_PENDING_WRITES, SemanticIndex
from tests.cache.conftest import cached, completion
from tests.factories import OrganizationFactory

# The async ORM commits on other connections: rows must not leak between tests.
pytestmark = pytest.mark.django_db(transaction=True)

DIMS = 1536
MODEL = "openai/gpt-4o-mini"
EMBEDDER = "text-embedding-3-small"
PART = "p" * 64  # an L3 partition (apps/cache/keys.py semantic_query)
rng = np.random.default_rng(11)


def vector(dims: int = DIMS) -> np.ndarray:
    return rng.standard_normal(dims).astype(np.float32)


def near(base: np.ndarray, similarity: float) -> list[float]:
    """A vector whose cosine similarity with ``base`` is ``similarity``."""
    unit = base / np.linalg.norm(base)
    other = vector(base.size)
    other -= other.dot(unit) * unit
    other /= np.linalg.norm(other)
    return (similarity * unit + np.sqrt(1 - similarity**2) * other).tolist()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def index(clock) -> SemanticIndex:
    return SemanticIndex(candidates=100, refresh_seconds=5, clock=clock)


@pytest.fixture
async def organization():
    return await database_sync_to_async(OrganizationFactory)()


@pytest.fixture
async def outsider():
    return await database_sync_to_async(OrganizationFactory)()


def write_directly(
    organization,
    base: np.ndarray,
    content: str,
    *,
    model=MODEL,
    expires_in=3600,
    embedder=EMBEDDER,
    partition=PART,
):
    """A row as another process's add writes it."""
    unit = (base / np.linalg.norm(base)).astype("<f4")
    return SemanticEntry.objects.create(
        organization=organization,
        model=model,
        partition=partition,
        embedding_model=embedder,
        dims=unit.size,
        vector=unit.tobytes(),
        answer=cached(completion(content=content)).dumps(),
        fingerprint="f" * 64,
        expires_at=timezone.now() + timedelta(seconds=expires_in),
    )


def content_of(found) -> str:
    import json

    answer, _ = found
    return json.loads(answer.body)["choices"][0]["message"]["content"]


async def test_it_serves_a_similar_prompt_above_the_threshold_and_not_below(index, organization):
    base = vector()
    answer = cached(completion(content="Paris."))
    assert await index.add(
        organization.id, MODEL, EMBEDDER, base.tolist(), answer, 3600, "f" * 64, partition=PART
    )

    found = await index.search(organization.id, MODEL, near(base, 0.97), 0.95, partition=PART)
    assert found is not None
    assert found[0] == answer
    assert found[1] == pytest.approx(0.97, abs=1e-4)
    assert await index.search(organization.id, MODEL, near(base, 0.93), 0.95, partition=PART) is None


async def test_it_picks_the_most_similar_entry(index, organization):
    base = vector()
    await index.add(
        organization.id,
        MODEL,
        EMBEDDER,
        near(base, 0.96),
        cached(completion(content="close")),
        3600,
        "a" * 64,
        partition=PART,
    )
    await index.add(
        organization.id,
        MODEL,
        EMBEDDER,
        near(base, 0.99),
        cached(completion(content="closest")),
        3600,
        "b" * 64,
        partition=PART,
    )
    await index.add(
        organization.id,
        MODEL,
        EMBEDDER,
        vector().tolist(),
        cached(completion(content="far")),
        3600,
        "c" * 64,
        partition=PART,
    )

    assert (
        content_of(await index.search(organization.id, MODEL, base.tolist(), 0.9, partition=PART))
        == "closest"
    )


async def test_another_organizations_entries_are_never_served(index, organization, outsider):
    base = vector()
    await index.add(
        outsider.id,
        MODEL,
        EMBEDDER,
        base.tolist(),
        cached(completion(content="theirs")),
        3600,
        "f" * 64,
        partition=PART,
    )

    assert await index.search(organization.id, MODEL, base.tolist(), 0.5, partition=PART) is None
    assert content_of(await index.search(outsider.id, MODEL, base.tolist(), 0.5, partition=PART)) == "theirs"
    # Loaded from the database by a fresh process too.
    fresh = SemanticIndex(candidates=100, refresh_seconds=5)
    assert await fresh.search(organization.id, MODEL, base.tolist(), 0.5, partition=PART) is None


async def test_another_model_or_embeddings_model_or_dimension_is_a_miss(index, organization):
    base = vector()
    await index.add(
        organization.id, MODEL, EMBEDDER, base.tolist(), cached(completion()), 3600, "f" * 64, partition=PART
    )

    assert await index.search(organization.id, "openai/gpt-4o", base.tolist(), 0.5, partition=PART) is None
    assert (
        await index.search(
            organization.id, MODEL, base.tolist(), 0.5, embedding_model="other-embedder", partition=PART
        )
        is None
    )
    assert await index.search(organization.id, MODEL, base[:768].tolist(), 0.5, partition=PART) is None
    assert (
        await index.search(
            organization.id, MODEL, base.tolist(), 0.5, embedding_model=EMBEDDER, partition=PART
        )
        is not None
    )


async def test_entries_added_by_another_process_appear_after_the_refresh_period(index, clock, organization):
    first, second = vector(), vector()
    await database_sync_to_async(write_directly)(organization, first, "first")
    assert (
        content_of(await index.search(organization.id, MODEL, first.tolist(), 0.95, partition=PART))
        == "first"
    )

    await database_sync_to_async(write_directly)(organization, second, "second")
    clock.now += 4.9
    assert (
        await index.search(organization.id, MODEL, second.tolist(), 0.95, partition=PART) is None
    )  # not refreshed yet
    clock.now += 0.1
    assert (
        content_of(await index.search(organization.id, MODEL, second.tolist(), 0.95, partition=PART))
        == "second"
    )
    assert (
        content_of(await index.search(organization.id, MODEL, first.tolist(), 0.95, partition=PART))
        == "first"
    )


async def test_an_entry_purged_by_another_process_is_never_served(index, clock, organization):
    base = vector()
    await database_sync_to_async(write_directly)(organization, base, "stale")
    assert await index.search(organization.id, MODEL, base.tolist(), 0.95, partition=PART) is not None

    await database_sync_to_async(SemanticEntry.objects.filter(organization=organization).delete)()

    assert (
        await index.search(organization.id, MODEL, base.tolist(), 0.95, partition=PART) is None
    )  # before any refresh
    await database_sync_to_async(write_directly)(organization, base, "after the purge")
    assert (
        content_of(await index.search(organization.id, MODEL, base.tolist(), 0.95, partition=PART))
        == "after the purge"
    )


async def test_an_expired_entry_is_not_served(index, organization):
    base = vector()
    await database_sync_to_async(write_directly)(organization, base, "old", expires_in=-1)
    await database_sync_to_async(write_directly)(organization, base, "soon gone", expires_in=3600)
    assert (
        content_of(await index.search(organization.id, MODEL, base.tolist(), 0.95, partition=PART))
        == "soon gone"
    )

    await database_sync_to_async(SemanticEntry.objects.filter(organization=organization).update)(
        expires_at=timezone.now()
    )

    assert await index.search(organization.id, MODEL, base.tolist(), 0.95, partition=PART) is None


async def test_only_the_most_recent_candidates_are_held(clock, organization):
    index = SemanticIndex(candidates=3, refresh_seconds=5, clock=clock)
    vectors = [vector() for _ in range(5)]
    for number, item in enumerate(vectors):
        await database_sync_to_async(write_directly)(organization, item, f"entry {number}")

    assert await index.search(organization.id, MODEL, vectors[0].tolist(), 0.95, partition=PART) is None
    assert await index.search(organization.id, MODEL, vectors[1].tolist(), 0.95, partition=PART) is None
    assert (
        content_of(await index.search(organization.id, MODEL, vectors[4].tolist(), 0.95, partition=PART))
        == "entry 4"
    )

    # Adding past the bound replaces the oldest held.
    newest = vector()
    await index.add(
        organization.id,
        MODEL,
        EMBEDDER,
        newest.tolist(),
        cached(completion(content="newest")),
        60,
        "n" * 64,
        partition=PART,
    )
    assert (
        content_of(await index.search(organization.id, MODEL, newest.tolist(), 0.95, partition=PART))
        == "newest"
    )
    assert await index.search(organization.id, MODEL, vectors[2].tolist(), 0.95, partition=PART) is None


async def test_a_process_holds_a_bounded_number_of_matrices_the_least_recently_searched_dropped(
    clock, organization
):
    index = SemanticIndex(candidates=10, refresh_seconds=5, clock=clock)
    index.max_partitions = 2
    stored = {model: vector() for model in ("m1", "m2", "m3")}
    for model, item in stored.items():
        await database_sync_to_async(write_directly)(organization, item, model, model=model)

    for model in ("m1", "m2", "m1", "m3"):  # m2 is the least recently searched when m3 comes
        assert (
            content_of(
                await index.search(organization.id, model, stored[model].tolist(), 0.95, partition=PART)
            )
            == model
        )

    assert {key[1] for key in index._partitions} == {"m1", "m3"}
    # A dropped one is loaded again when it is searched.
    assert (
        content_of(await index.search(organization.id, "m2", stored["m2"].tolist(), 0.95, partition=PART))
        == "m2"
    )


@pytest.mark.parametrize("bad", [[], [0.0] * 8, [float("nan")] * 8, [[1.0, 2.0]], [1.0] * 20_000])
async def test_a_vector_that_cannot_be_compared_is_a_miss_and_never_stored(index, organization, bad):
    assert await index.search(organization.id, MODEL, bad, 0.5, partition=PART) is None
    assert not await index.add(
        organization.id, MODEL, EMBEDDER, bad, cached(completion()), 60, "f" * 64, partition=PART
    )
    assert await database_sync_to_async(SemanticEntry.objects.count)() == 0


async def test_writes_in_flight_are_bounded(index, organization):
    index.pending_writes = MAX_PENDING_WRITES  # as if that many were still being written

    assert not await index.add(
        organization.id,
        MODEL,
        EMBEDDER,
        vector().tolist(),
        cached(completion()),
        60,
        "f" * 64,
        partition=PART,
    )
    assert await database_sync_to_async(SemanticEntry.objects.count)() == 0
