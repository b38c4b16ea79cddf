"""L3: an earlier answer to a similar prompt, of the same organization, model and partition.

The partition (``keys.semantic_query``) is a hash of everything but the prompt's words that shapes
the answer (the parameters, the messages' roles, the allowed data regions): a search compares only
prompts whose answers could be interchanged.

Debian's PostgreSQL has no pgvector, so each entry's vector is stored with it (``SemanticEntry``)
and searched here with NumPy: per (organization, model, partition, dimensions) this process holds the most
recent ``GATEWAY_CACHE_L3_CANDIDATES`` entries as one normalized float32 matrix, so a search is a
matrix-vector product (cosine similarity) and an argmax. The matrix is loaded on first use, in a
thread, and refreshed when older than ``GATEWAY_CACHE_L3_REFRESH_SECONDS`` with the rows newer than
the newest it holds: entries other processes add appear within that period.

A hit reads its answer from the database by id (answers are not held in memory: 10,000 of them
could be gigabytes), so an entry purged in another process is never served: its row is gone, the
search answers a miss and the organization's matrix is dropped and loaded again.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from .models import SemanticEntry
from .stored_answers import CachedAnswer

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

MAX_DIMS = 16_384
# Writes in flight at once; past that an add is dropped (the proxy calls add after each answer).
MAX_PENDING_WRITES = 16
# Rows created this long before the newest one held are read again at a refresh: a row whose
# transaction committed after a newer one's would otherwise be skipped forever.
REFRESH_OVERLAP = timedelta(seconds=2)


def _numpy():
    """NumPy, imported on first use: a server process whose organizations never turn L3 on never
    loads it (84 modules and about 8 MiB of the process here; docs/benchmarks.md)."""
    import numpy

    return numpy


@dataclass(eq=False)
class _Partition:
    dims: int
    capacity: int
    vectors: np.ndarray = field(init=False)
    expires: np.ndarray = field(init=False)  # Unix seconds; -inf for a slot not in use
    embedders: np.ndarray = field(init=False)  # the embedding model's code (SemanticIndex._code)
    ids: list = field(init=False)
    held: set = field(default_factory=set)
    size: int = 0
    next_slot: int = 0
    newest: datetime | None = None
    newest_id: uuid.UUID | None = None
    loaded_at: float = 0.0
    refreshing: bool = False

    def __post_init__(self) -> None:
        self._allocate(min(self.capacity, 64))

    def _allocate(self, slots: int) -> None:
        np = _numpy()
        vectors = np.zeros((slots, self.dims), dtype=np.float32)
        expires = np.full(slots, -np.inf)
        embedders = np.full(slots, -1, dtype=np.int32)
        ids: list = [None] * slots
        if self.size:
            vectors[: self.size] = self.vectors[: self.size]
            expires[: self.size] = self.expires[: self.size]
            embedders[: self.size] = self.embedders[: self.size]
            ids[: self.size] = self.ids[: self.size]
        self.vectors, self.expires, self.embedders, self.ids = vectors, expires, embedders, ids

    def append(self, row_id, vector: np.ndarray, expires_at: float, embedder: int, created_at) -> None:
        """Rows arrive oldest first; once full, a new row replaces the oldest held."""
        if row_id in self.held:
            return
        if self.size < self.capacity and self.size == len(self.ids):
            self._allocate(min(self.capacity, 2 * len(self.ids)))
        slot = self.next_slot
        if self.ids[slot] is not None:
            self.held.discard(self.ids[slot])
        self.vectors[slot] = vector
        self.expires[slot] = expires_at
        self.embedders[slot] = embedder
        self.ids[slot] = row_id
        self.held.add(row_id)
        self.size = max(self.size, slot + 1)
        self.next_slot = (slot + 1) % self.capacity
        if self.newest is None or created_at >= self.newest:
            self.newest, self.newest_id = created_at, row_id


def _normalized(vector) -> np.ndarray | None:
    np = _numpy()
    array = np.asarray(vector, dtype=np.float32)
    if array.ndim != 1 or not 0 < array.size <= MAX_DIMS or not np.all(np.isfinite(array)):
        return None
    norm = float(np.linalg.norm(array))
    if norm == 0 or not math.isfinite(norm):
        return None
    return array / norm


_ROW_FIELDS = ("id", "vector", "expires_at", "embedding_model", "created_at")


def _read_rows(
    organization_id, model: str, partition: str, dims: int, *, candidates: int, since, newest_id
) -> tuple[list, bool]:
    """(rows oldest first, whether the newest row held is still there)."""
    rows = SemanticEntry.objects.filter(
        organization_id=organization_id,
        model=model,
        partition=partition,
        dims=dims,
        expires_at__gt=timezone.now(),
    )
    if since is not None:
        rows = rows.filter(created_at__gte=since - REFRESH_OVERLAP)
    found = list(rows.order_by("-created_at").values(*_ROW_FIELDS)[:candidates])
    still_there = newest_id is None or SemanticEntry.objects.filter(pk=newest_id).exists()
    found.reverse()
    return found, still_there


def _read_answer(row_id) -> bytes | None:
    row = SemanticEntry.objects.filter(pk=row_id, expires_at__gt=timezone.now()).values("answer").first()
    return None if row is None else bytes(row["answer"])


# The most (organization, model, partition, dimensions) matrices a process holds, the least recently searched
# dropped first: each can reach GATEWAY_CACHE_L3_CANDIDATES x dimensions float32 (59 MiB at 10,000 x
# 1,536), so this bounds a process's L3 memory (a dropped one is loaded again when next searched).
MAX_PARTITIONS = 16

# (organization, model, partition, dimensions): one matrix.
_Key = tuple[str, str, str, int]


class SemanticIndex:
    """One per process. ``search`` and ``add`` run on the event loop; the database work in threads."""

    def __init__(
        self,
        *,
        candidates: int | None = None,
        refresh_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.candidates = candidates or settings.GATEWAY_CACHE_L3_CANDIDATES
        self.refresh_seconds = refresh_seconds or settings.GATEWAY_CACHE_L3_REFRESH_SECONDS
        self._clock = clock
        self._partitions: OrderedDict[_Key, _Partition] = OrderedDict()
        self.max_partitions = MAX_PARTITIONS
        self._loading: set[_Key] = set()
        self._codes: dict[str, int] = {}
        self.pending_writes = 0

    def _code(self, embedding_model: str) -> int:
        return self._codes.setdefault(embedding_model, len(self._codes))

    def forget(self, organization_id) -> None:
        """Drops what this process holds of the organization (a purge)."""
        organization_id = str(organization_id)
        for key in [key for key in self._partitions if key[0] == organization_id]:
            del self._partitions[key]

    async def _partition(self, key: _Key) -> _Partition | None:
        partition = self._partitions.get(key)
        if partition is None:
            if key in self._loading:
                return None  # another request is loading it: a miss rather than a second load
            self._loading.add(key)
            try:
                partition = _Partition(dims=key[3], capacity=self.candidates)
                await self._fill(key, partition)
                self._partitions[key] = partition
                while len(self._partitions) > self.max_partitions:
                    self._partitions.popitem(last=False)
            finally:
                self._loading.discard(key)
            return partition
        self._partitions.move_to_end(key)
        if self._clock() - partition.loaded_at >= self.refresh_seconds and not partition.refreshing:
            partition.refreshing = True
            try:
                if not await self._fill(key, partition):
                    self._partitions.pop(key, None)  # rows it held are gone: a purge elsewhere
                    return await self._partition(key)
            finally:
                partition.refreshing = False
        return partition

    async def _fill(self, key: _Key, partition: _Partition) -> bool:
        np = _numpy()
        organization_id, model, partition_hash, dims = key
        rows, still_there = await database_sync_to_async(_read_rows)(
            organization_id,
            model,
            partition_hash,
            dims,
            candidates=self.candidates,
            since=partition.newest,
            newest_id=partition.newest_id,
        )
        if not still_there:
            return False
        for row in rows:
            vector = _normalized(np.frombuffer(bytes(row["vector"]), dtype="<f4"))
            if vector is None or vector.size != dims:
                continue
            partition.append(
                row["id"],
                vector,
                row["expires_at"].timestamp(),
                self._code(row["embedding_model"]),
                row["created_at"],
            )
        partition.loaded_at = self._clock()
        return True

    async def search(
        self,
        organization_id,
        model: str,
        vector: list[float],
        threshold: float,
        *,
        partition: str,
        embedding_model: str | None = None,
    ) -> tuple[CachedAnswer, float] | None:
        """The best earlier answer of ``partition`` whose prompt's cosine similarity with ``vector``
        is at least ``threshold``, with that similarity; None otherwise. Pass ``embedding_model`` so
        vectors of another embeddings model (same dimensions, unrelated space) are never compared."""
        np = _numpy()
        query = _normalized(vector)
        if query is None:
            return None
        key = (str(organization_id), model, partition, int(query.size))
        partition = await self._partition(key)
        if partition is None or partition.size == 0:
            return None
        size = partition.size
        similarities = partition.vectors[:size] @ query
        alive = partition.expires[:size] > time.time()
        if embedding_model is not None:
            code = self._codes.get(embedding_model)
            if code is None:
                return None
            alive &= partition.embedders[:size] == code
        similarities = np.where(alive, similarities, -np.inf)
        best = int(np.argmax(similarities))
        similarity = float(similarities[best])
        if not similarity >= threshold:
            return None
        row_id = partition.ids[best]
        data = await database_sync_to_async(_read_answer)(row_id)
        if data is None:
            # Purged (or cleaned up) since it was loaded.
            self._partitions.pop(key, None)
            return None
        try:
            return CachedAnswer.loads(data), min(similarity, 1.0)
        except ValueError:
            return None

    async def add(
        self,
        organization_id,
        model: str,
        embedding_model: str,
        vector: list[float],
        answer: CachedAnswer,
        ttl_seconds: int,
        fingerprint: str,
        *,
        partition: str,
    ) -> bool:
        """Stores an entry; False when it was not (a bad vector, too large an answer, too many
        writes in flight, or the database refused). Never raises for those."""
        normalized = _normalized(vector)
        data = answer.dumps()
        if normalized is None or ttl_seconds <= 0 or len(data) > settings.GATEWAY_CACHE_MAX_ENTRY_BYTES:
            return False
        if self.pending_writes >= MAX_PENDING_WRITES:
            return False
        self.pending_writes += 1
        try:
            row = await database_sync_to_async(SemanticEntry.objects.create)(
                organization_id=organization_id,
                model=model,
                partition=partition,
                embedding_model=embedding_model,
                dims=normalized.size,
                vector=normalized.astype("<f4").tobytes(),
                answer=data,
                fingerprint=fingerprint,
                expires_at=timezone.now() + timedelta(seconds=ttl_seconds),
            )
        except DatabaseError as error:
            logger.warning("Storing an L3 cache entry failed (%s)", type(error).__name__)
            return False
        finally:
            self.pending_writes -= 1
        held = self._partitions.get((str(organization_id), model, partition, int(normalized.size)))
        if held is not None:  # seen by this process at once, by the others at their refresh
            held.append(
                row.id, normalized, row.expires_at.timestamp(), self._code(embedding_model), row.created_at
            )
        return True


# The proxy's: one per process.
semantic_index = SemanticIndex()
