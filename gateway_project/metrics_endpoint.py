"""``GET /metrics``: the node's metrics in Prometheus's text format, on the lean path
(gateway_project/asgi.py), so a scrape loads no management code into a server process.

What a scrape sees: every process's metrics summed (metrics.py), the outbox's backlog read off the
spool at the scrape (entries written by the servers and not yet in the database, and how long the
oldest file has waited), and the process metrics (CPU, memory, open files) of the server process
that answered. With ``GATEWAY_METRICS_TOKEN`` set, a scrape must send ``Authorization: Bearer
<token>``; without, ``/metrics`` is open, and belongs on the private network (docs/operations.md).
"""

import asyncio
import glob
import hmac
import json
import logging
import os
import struct
import threading
import time
from pathlib import Path

from django.conf import settings
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector

from apps.observability.metrics import PREFIX
from apps.outbox import spool

logger = logging.getLogger(__name__)

_READ_CHUNK = 1 << 20
# The classic text format, which every Prometheus reads (what generate_latest writes).
TEXT_FORMAT = CONTENT_TYPE_PLAIN_0_0_4


class OutboxCollector:
    """The spool's backlog: what the node's ingest has still to write. Read at most every
    ``MAX_AGE`` seconds, one read at a time, and exactly up to ``EXACT_BYTES`` of spool (beyond, the
    entries are estimated from the size and the lines counted so far): a scrape during a long
    database outage, or many scrapes at once, never reads gigabytes."""

    MAX_AGE = 5.0
    EXACT_BYTES = 16 << 20

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._backlog = (0, 0.0)

    def collect(self):
        entries, oldest = self.backlog()
        yield GaugeMetricFamily(
            f"{PREFIX}_outbox_backlog",
            "Entries on this node's spool not yet written to the database by the ingest.",
            value=entries,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_outbox_oldest_seconds",
            "How long the oldest spool file has waited for the ingest (0: none waits).",
            value=round(oldest, 3),
        )

    def backlog(self) -> tuple[int, float]:
        with self._lock:
            if time.monotonic() - self._read_at >= self.MAX_AGE:
                self._backlog = self._read()
                self._read_at = time.monotonic()
            return self._backlog

    def _read(self) -> tuple[int, float]:
        counted = counted_bytes = unread_bytes = 0
        oldest, now = 0.0, time.time()
        for path in spool.waiting_files(self.directory):
            try:
                with open(path, "rb") as file:
                    status = os.fstat(file.fileno())
                    oldest = max(oldest, now - status.st_mtime)
                    if counted_bytes >= self.EXACT_BYTES:
                        unread_bytes += status.st_size
                        continue
                    while chunk := file.read(_READ_CHUNK):
                        counted += chunk.count(b"\n")
                        counted_bytes += len(chunk)
            except FileNotFoundError:  # the ingest finished it meanwhile
                continue
        if unread_bytes and counted:
            counted += round(unread_bytes * counted / counted_bytes)
        return counted, oldest


_outbox = OutboxCollector(Path(settings.GATEWAY_OUTBOX_DIR))


class SparingMultiProcessCollector(MultiProcessCollector):
    """prometheus-client's sum over every process's files, leaving out a file it cannot read: one a
    process is creating (empty for an instant), one a process killed as it created it left empty or
    half-written for good, one deleted meanwhile. Its own collector raised on any of them: the scrape
    answered 500, and for a file left half-made, every scrape after it."""

    def collect(self):
        files = [path for path in glob.glob(os.path.join(self._path, "*.db")) if _readable(path)]
        return self.merge(files, accumulate=True)


def _readable(path: str) -> bool:
    try:
        for key, *_ in MmapedDict.read_all_values_from_file(path):
            json.loads(key)
    except (OSError, struct.error, RuntimeError, UnicodeDecodeError, ValueError):
        return False
    return True


# A file can still change between that look and the sum (a process creating one at that instant):
# the scrape reads them all again, this many times, before it answers 503.
EXPOSITION_ATTEMPTS = 3


def exposition() -> bytes:
    for attempt in range(EXPOSITION_ATTEMPTS):
        try:
            return _exposition()
        except Exception:
            if attempt == EXPOSITION_ATTEMPTS - 1:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def _exposition() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    SparingMultiProcessCollector(registry, path=settings.GATEWAY_METRICS_DIR)
    registry.register(_outbox)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return generate_latest(registry)


def authorized(headers: list[tuple[bytes, bytes]]) -> bool:
    token = settings.GATEWAY_METRICS_TOKEN
    if not token:
        return True
    sent = next((value for name, value in headers if name.lower() == b"authorization"), b"")
    scheme, _, credentials = sent.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), token.encode())


async def metrics_app(scope, receive, send) -> None:
    if scope["method"] not in ("GET", "HEAD"):
        await _answer(send, 405, b"Method not allowed: GET /metrics.\n", {"allow": "GET, HEAD"})
    elif not authorized(scope["headers"]):
        await _answer(
            send,
            401,
            b"Unauthorized: send Authorization: Bearer <GATEWAY_METRICS_TOKEN>.\n",
            {"www-authenticate": 'Bearer realm="metrics"'},
        )
    else:
        # The files of every process, and the spool: read on a thread, never the event loop's.
        try:
            body = await asyncio.to_thread(exposition)
        except Exception:
            logger.warning("A scrape of /metrics failed; the next one reads the files again", exc_info=True)
            await _answer(send, 503, b"The metrics could not be read; scrape again.\n", {"retry-after": "1"})
            return
        await _answer(send, 200, body if scope["method"] == "GET" else b"", {}, TEXT_FORMAT)


async def _answer(send, status: int, body: bytes, headers: dict[str, str], content_type="text/plain") -> None:
    encoded = [
        (b"content-type", content_type.encode()),
        (b"cache-control", b"no-store"),
        *((name.encode(), value.encode()) for name, value in headers.items()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})
