"""The console's live tail: each finished request's summary, published to its organization's group.

The proxy hands every finished request's record to the audit log (``records.emit``), in the same
step as the answer's last send. The tail listens there too, and does as little as it can on that
step: it copies a few of the record's fields into a tuple and appends it to a bounded queue (about a
microsecond, see docs); at most once per ``interval`` a timer on the event loop starts a task that
turns the queued tuples into summaries and sends one message per organization to the channel layer
group ``tail.<organization_id>`` (``apps/console/consumers.py`` listens there). So the request
itself never waits for the channel layer, Redis or a database, and a burst costs one message per
organization per interval, not one per request.

Why here and not in the ingest, where the entries are written: the tail must work in the embedded
default too, where the channel layer is in memory and only reaches consumers of the process that
publishes, the Daphne process that answered (the ingest runs in the Celery worker). With
``REDIS_URL`` every process publishes to Redis and every process's consumers receive.

A summary holds the log list's fields (``selectors.SUMMARY_FIELDS``: time, status, models,
provider, team, key prefix, tokens, cost, latency, cache, policy action): never a body, a header or
a policy's matched text, whatever the organization keeps. The tail is best effort: a summary may be
dropped (the queue is full, the channel layer is down, a consumer's buffer is full); the audit log
is the record.
"""

import asyncio
import contextvars
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

from .records import RequestRecord
from .time_ranges import format_instant

logger = logging.getLogger(__name__)

MESSAGE_TYPE = "tail.requests"  # handled by the consumer's ``tail_requests``

# What is copied off the record on the request: references only (all immutable values).
_FIELDS = (
    "organization_id",
    "request_id",
    "started_at",
    "endpoint",
    "team_id",
    "api_key_id",
    "api_key_prefix",
    "requested_model",
    "model",
    "provider",
    "stream",
    "status",
    "error_type",
    "error_code",
    "cache",
    "policy_action",
    "usage",
    "cost_usd",
    "latency_ms",
    "ttft_ms",
)
_snapshot = attrgetter(*_FIELDS)


def tail_group(organization_id) -> str:
    """The channel layer group of one organization's tail."""
    return f"tail.{organization_id}"


def summary(values: tuple) -> dict[str, Any]:
    """A snapshot as the log list shows an entry (the API's summary fields), in plain values that
    every channel layer can carry."""
    row = dict(zip(_FIELDS, values, strict=True))
    usage = row["usage"]
    return {
        "log_id": row["request_id"],
        "created_at": format_instant(row["started_at"], timespec="seconds"),
        "endpoint": row["endpoint"],
        "team_id": row["team_id"],
        "api_key_id": row["api_key_id"],
        "api_key_prefix": row["api_key_prefix"] or "",
        "requested_model": (row["requested_model"] or "")[:200],
        "model": (row["model"] or "")[:200],
        "provider": row["provider"] or "",
        "stream": bool(row["stream"]),
        "status": row["status"],
        "error_type": row["error_type"] or "",
        "error_code": row["error_code"] or "",
        "cache": row["cache"],
        "policy_action": row["policy_action"] or "",
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cost_usd": f"{row['cost_usd']:.8f}",
        "latency_ms": row["latency_ms"],
        "ttft_ms": row["ttft_ms"],
    }


class TailPublisher:
    """Collects snapshots on the request (``hand_off``) and publishes them from a task of the same
    event loop, at most once per ``interval`` seconds."""

    def __init__(
        self,
        *,
        interval: float = 0.1,
        max_pending: int = 5000,
        max_per_message: int = 100,
        send_timeout: float = 2.0,
    ) -> None:
        self.interval = interval
        self.max_per_message = max_per_message  # a burst shows its latest requests
        self.send_timeout = send_timeout
        self._pending: deque[tuple] = deque(maxlen=max_pending)  # the oldest go first when full
        self._scheduled_on: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._warned_at = 0.0

    def hand_off(self, record: RequestRecord) -> None:
        """The ``records.on_record`` listener: runs on the request's event loop, after the answer's
        last send. A tuple and a deque append; a timer at most once per interval."""
        if record.organization_id is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script): no consumer could be reached from here
            return
        self._pending.append(_snapshot(record))
        if self._scheduled_on is not loop:
            self._schedule(loop)

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled_on = loop
        loop.call_later(self.interval, self._start_flush, loop, context=contextvars.Context())

    def _start_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        task = loop.create_task(self.flush(), context=contextvars.Context())
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        loop = task.get_loop()
        if self._scheduled_on is loop:
            self._scheduled_on = None
        # What arrived while this flush ran is published by the next one.
        if self._pending and not task.cancelled() and not loop.is_closed():
            self._schedule(loop)

    def drain(self, watched: Callable[[str], bool] = lambda _: True) -> dict[str, list[dict[str, Any]]]:
        """The queued snapshots as summaries per organization, the latest ``max_per_message``, for the
        organizations ``watched`` says someone may be watching (the others' are dropped unmade)."""
        by_organization: dict[str, list[tuple]] = defaultdict(list)
        while self._pending:
            values = self._pending.popleft()
            by_organization[str(values[0])].append(values)
        return {
            organization_id: [summary(values) for values in rows[-self.max_per_message :]]
            for organization_id, rows in by_organization.items()
            if watched(organization_id)
        }

    async def flush(self) -> None:
        layer = get_channel_layer()
        batches = self.drain(_watched_in(layer))
        if layer is None or not batches:
            return
        for organization_id, requests in batches.items():
            message = {"type": MESSAGE_TYPE, "requests": requests}
            try:
                await asyncio.wait_for(
                    layer.group_send(tail_group(organization_id), message), self.send_timeout
                )
            except Exception as error:  # the layer's Redis down or slow: the tail waits, requests do not
                now = time.monotonic()
                if now - self._warned_at > 60:
                    self._warned_at = now
                    logger.warning("The live tail could not publish (%s); summaries dropped", error)


def _watched_in(layer) -> Callable[[str], bool]:
    """Whether an organization's tail may have a watcher. The embedded default's in-memory layer
    holds its groups in this process, so an organization nobody watches costs no summaries (about 1 %
    of a request's CPU). Another layer's groups live elsewhere (Redis), its watchers in any process:
    every organization is published."""
    if not isinstance(layer, InMemoryChannelLayer):
        return lambda _: True
    groups = layer.groups
    return lambda organization_id: bool(groups.get(tail_group(organization_id)))


publisher = TailPublisher()
