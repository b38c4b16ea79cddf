"""The L3 look-up at 10,000 entries of 1,536 dimensions (docs/cache.md). Not part of the suite:
run it on its own, against PostgreSQL for figures that mean something:

    DATABASE_URL=postgres://... .venv/bin/python -m pytest -q -s tests/cache/measure_l3.py
"""

import statistics
import time
from datetime import timedelta

import numpy as np
import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from apps.cache.models import SemanticEntry
from apps.cache.semantic import SemanticIndex
from tests.cache.conftest import cached, completion
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db(transaction=True)

ENTRIES, DIMS, RUNS = 10_000, 1536, 200


def fill(organization) -> np.ndarray:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((ENTRIES, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    answer = cached(completion(content="An answer of a typical length. " * 20)).dumps()
    expires_at = timezone.now() + timedelta(hours=1)
    SemanticEntry.objects.bulk_create(
        (
            SemanticEntry(
                organization=organization,
                model="m",
                embedding_model="e",
                dims=DIMS,
                vector=vector.astype("<f4").tobytes(),
                answer=answer,
                fingerprint="f" * 64,
                expires_at=expires_at,
            )
            for vector in vectors
        ),
        batch_size=500,
    )
    return vectors


def milliseconds(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[int(len(ordered) * 0.99)]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


async def test_measure_the_l3_look_up():
    organization = await database_sync_to_async(OrganizationFactory)()
    vectors = await database_sync_to_async(fill)(organization)
    index = SemanticIndex(candidates=ENTRIES, refresh_seconds=3600)
    rng = np.random.default_rng(2)

    started = time.perf_counter()
    await index.search(organization.id, "m", rng.standard_normal(DIMS).tolist(), 0.95)
    load = time.perf_counter() - started

    misses, hits = [], []
    for number in range(RUNS):
        query = rng.standard_normal(DIMS).tolist()
        started = time.perf_counter()
        assert await index.search(organization.id, "m", query, 0.95) is None
        misses.append(time.perf_counter() - started)
        started = time.perf_counter()
        assert await index.search(organization.id, "m", vectors[number].tolist(), 0.95) is not None
        hits.append(time.perf_counter() - started)

    print(f"\nL3, {ENTRIES} entries of {DIMS} dims: first load {load * 1000:.0f} ms")
    print(f"miss (search only): {milliseconds(misses)}")
    print(f"hit (search + the answer read by id): {milliseconds(hits)}")
