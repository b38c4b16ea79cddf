"""The L3 (semantic) cache look-up at 10,000 entries of 1,536 dimensions, in its own process.

Run with DJANGO_SETTINGS_MODULE=gateway_project.settings, after ``manage.py migrate``:

    python -m bench.semantic <organization id>       # prints JSON

It stores 10,000 random unit vectors (float32, as the cache keeps them) with one answer each for the
organization, then times ``SemanticIndex.search`` as the proxy calls it: the first load of the rows
into memory, a miss (the matrix-vector product, the mask, the best match) and a hit (the same, plus
the answer read from its row). The rows go with the organization when the benchmark deletes it.
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import django

ENTRIES, DIMENSIONS, RUNS = 10_000, 1_536, 200
MODEL, EMBEDDER = "openai/gpt-4o-mini", "text-embedding-3-small"
PARTITION = (
    "p" * 64
)  # one partition: the entries a request of the same parameters and regions may be answered by


def fill(organization_id: str):
    import numpy as np

    from apps.cache.models import SemanticEntry
    from apps.cache.stored_answers import CachedAnswer

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((ENTRIES, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    body = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "An answer of a typical length. " * 20},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 120, "total_tokens": 160},
        }
    ).encode()
    answer = CachedAnswer(body, "openai", "gpt-4o-mini", 40, 120, 0, Decimal("0.0001"), datetime.now(UTC))
    data, expires_at = answer.dumps(), datetime.now(UTC) + timedelta(hours=1)
    SemanticEntry.objects.bulk_create(
        (
            SemanticEntry(
                organization_id=organization_id,
                model=MODEL,
                embedding_model=EMBEDDER,
                partition=PARTITION,
                dims=DIMENSIONS,
                vector=vector.astype("<f4").tobytes(),
                answer=data,
                fingerprint="f" * 64,
                expires_at=expires_at,
            )
            for vector in vectors
        ),
        batch_size=500,
    )
    return vectors


async def measure(organization_id: str, vectors) -> dict[str, float]:
    import numpy as np

    from apps.cache.semantic import SemanticIndex

    index = SemanticIndex(candidates=ENTRIES, refresh_seconds=3600)
    rng = np.random.default_rng(2)
    began = time.perf_counter()
    await index.search(
        organization_id, MODEL, rng.standard_normal(DIMENSIONS).tolist(), 0.95, partition=PARTITION
    )
    load = time.perf_counter() - began
    misses, hits = [], []
    for number in range(RUNS):
        query = rng.standard_normal(DIMENSIONS).tolist()
        began = time.perf_counter()
        if (
            await index.search(
                organization_id, MODEL, query, 0.95, partition=PARTITION, embedding_model=EMBEDDER
            )
            is not None
        ):
            raise SystemExit("a random vector matched: the measurement is wrong")
        misses.append(time.perf_counter() - began)
        began = time.perf_counter()
        found = await index.search(
            organization_id,
            MODEL,
            vectors[number].tolist(),
            0.95,
            partition=PARTITION,
            embedding_model=EMBEDDER,
        )
        if found is None:
            raise SystemExit("a stored vector did not match itself: the measurement is wrong")
        hits.append(time.perf_counter() - began)
    return {
        "entries": ENTRIES,
        "dimensions": DIMENSIONS,
        "load_ms": load * 1000,
        "miss_p50_ms": _percentile(misses, 50),
        "miss_p99_ms": _percentile(misses, 99),
        "hit_p50_ms": _percentile(hits, 50),
        "hit_p99_ms": _percentile(hits, 99),
    }


def _percentile(samples: list[float], p: float) -> float:
    if p == 50:
        return statistics.median(samples) * 1000
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("organization_id")
    organization_id = parser.parse_args().organization_id
    django.setup()
    vectors = fill(organization_id)
    print(json.dumps(asyncio.run(measure(organization_id, vectors))))


if __name__ == "__main__":
    sys.exit(main())
