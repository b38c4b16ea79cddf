"""A proxy request's metrics, counted off the request.

The proxy hands each finished request's record to its listeners (``apps.audit.records.emit``) in the
step that sends the answer's last bytes. This listener copies the few fields the metrics need into a
tuple and queues it (under a microsecond); a timer on the event loop, at most once per ``interval``,
adds the queued requests to the metrics (metrics.py): one increment per label set and bucket of the
batch, not per request, since each increment writes to the node's shared files. Measured in
docs/benchmarks.md ("Metrics").

The metrics trail the answers by at most ``interval`` (a scrape every 15 s or more never notices);
a server that stops flushes what is queued (``flush``, gateway_project/serve.py).
"""

import asyncio
import bisect
import contextvars
import logging
from collections import Counter, defaultdict, deque
from decimal import Decimal
from operator import attrgetter
from typing import Any

from django.conf import settings

from . import metrics

logger = logging.getLogger(__name__)

_FIELDS = (
    "organization_id",
    "endpoint",
    "model",
    "requested_model",
    "provider",
    "status",
    "error_code",
    "cache",
    "policy_action",
    "usage",
    "cost_usd",
    "latency_ms",
    "ttft_ms",
    "upstream_ms",
    "attempts",
)
_snapshot = attrgetter(*_FIELDS)

OTHER = "other"  # a label value past its bound
MODEL_LENGTH = 100
UNKNOWN_ENDPOINT = "unknown"  # a path the proxy does not serve: never the path itself


def overhead_ms(latency_ms: float, ttft_ms: float | None, upstream_ms: float) -> float:
    """What the gateway added: until the answer's end less the upstream's wait; for a stream, until
    its first chunk (the generation after it is the model's, not the gateway's), as the
    ``x-gateway-overhead-ms`` header says."""
    until = ttft_ms if ttft_ms is not None else latency_ms
    return max(0.0, until - upstream_ms)


class BoundedValues:
    """The label values seen so far, at most ``limit`` of them; later new values read ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(value)
        return value


class _Observations:
    """One histogram child's observations of a batch: the count per bucket and the sum."""

    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0


class _Histogram:
    """A batch's observations of one histogram, by label values, added to it in one go."""

    def __init__(self, histogram, bounds: tuple[float, ...]) -> None:
        self.histogram = histogram
        self.bounds = bounds
        self.by_labels: dict[tuple[str, ...], _Observations] = {}

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        observations = self.by_labels.get(labels)
        if observations is None:
            observations = self.by_labels[labels] = _Observations(len(self.bounds) + 1)
        observations.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        observations.total += seconds

    def add_to_metric(self) -> None:
        # prometheus-client's histogram keeps one value per bucket (not cumulative) and the sum;
        # ``observe`` adds 1 to one bucket. A batch adds its counts to the same values directly,
        # one write per bucket it touched instead of one per request (tests/observability check
        # the scraped buckets against the requests sent).
        for labels, observations in self.by_labels.items():
            child = self.histogram.labels(*labels)
            for index, count in enumerate(observations.counts):
                if count:
                    child._buckets[index].inc(count)
            child._sum.inc(observations.total)


class RequestMetrics:
    def __init__(self, *, interval: float = 1.0, max_pending: int = 100_000) -> None:
        self.interval = interval
        self._pending: deque[tuple] = deque(maxlen=max_pending)
        self._scheduled_on: asyncio.AbstractEventLoop | None = None
        self._models = BoundedValues(settings.GATEWAY_METRICS_MAX_MODELS)
        self._endpoints = BoundedValues(64)

    def hand_off(self, record: Any) -> None:
        """The ``records.on_record`` listener (apps/audit/services.py connects it): a tuple of the
        ``RequestRecord``'s fields queued, and a timer at most once per interval (no event loop: a
        script's or a test's record, added at once)."""
        self._pending.append(_snapshot(record))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._scheduled_on is not loop:
            self._scheduled_on = loop
            loop.call_later(self.interval, self._flush_on, loop, context=contextvars.Context())

    def _flush_on(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled_on = None
        try:
            self.flush()
        except Exception:  # the metrics never stop the server; the next batch tries again
            logger.exception("Metrics: a batch of request metrics could not be added")

    def flush(self) -> None:
        """Adds every queued request to the metrics."""
        if not self._pending:
            return
        requests: Counter[tuple[str, ...]] = Counter()
        cache: Counter[tuple[str, ...]] = Counter()
        policy: Counter[str] = Counter()
        upstream_errors: Counter[tuple[str, str]] = Counter()
        input_tokens: defaultdict[tuple[str, ...], int] = defaultdict(int)
        output_tokens: defaultdict[tuple[str, ...], int] = defaultdict(int)
        cost: defaultdict[tuple[str, ...], Decimal] = defaultdict(Decimal)
        durations = _Histogram(metrics.request_duration, metrics.DURATION_BUCKETS)
        overheads = _Histogram(metrics.overhead, metrics.OVERHEAD_BUCKETS)
        ttfts = _Histogram(metrics.ttft, metrics.DURATION_BUCKETS)
        upstreams = _Histogram(metrics.upstream_duration, metrics.DURATION_BUCKETS)
        per_organization = metrics.PER_ORGANIZATION
        pending = self._pending
        while pending:
            (
                organization_id,
                endpoint,
                model,
                requested_model,
                provider,
                status,
                error_code,
                cache_result,
                policy_action,
                usage,
                cost_usd,
                latency_ms,
                ttft_ms,
                upstream_ms,
                attempts,
            ) = pending.popleft()
            endpoint = UNKNOWN_ENDPOINT if error_code == "unknown_url" else self._endpoints(endpoint)
            organization = (organization_id or "",) if per_organization else ()
            # Only an answered request names its model: a refused one's may be anything a client
            # typed (a model the catalog does not have, "openai/<anything>" an upstream refused).
            served_model = (model or requested_model or "")[:MODEL_LENGTH] if status < 400 else ""
            model_label = self._models(served_model) if served_model else ""
            requests[(endpoint, model_label, provider or "", str(status), *organization)] += 1
            cache[(cache_result, *organization)] += 1
            if policy_action:
                policy[policy_action] += 1
            if usage is not None:
                input_tokens[organization] += usage.input_tokens
                output_tokens[organization] += usage.output_tokens
            if cost_usd:
                cost[(provider or "", *organization)] += cost_usd
            by_endpoint = (endpoint,)
            durations.observe(by_endpoint, latency_ms / 1000)
            overheads.observe(by_endpoint, overhead_ms(latency_ms, ttft_ms, upstream_ms) / 1000)
            if ttft_ms is not None:
                ttfts.observe(by_endpoint, ttft_ms / 1000)
            for attempt in attempts:
                upstreams.observe((attempt.provider,), attempt.latency_ms / 1000)
                if attempt.outcome != "ok":
                    upstream_errors[(attempt.provider, attempt.outcome)] += 1
        for labels, count in requests.items():
            metrics.requests.labels(*labels).inc(count)
        for labels, count in cache.items():
            metrics.cache_requests.labels(*labels).inc(count)
        for action, count in policy.items():
            metrics.policy_actions.labels(action).inc(count)
        for labels, count in upstream_errors.items():
            metrics.upstream_errors.labels(*labels).inc(count)
        for labels, count in input_tokens.items():
            if count:
                metrics.tokens.labels("input", *labels).inc(count)
        for labels, count in output_tokens.items():
            if count:
                metrics.tokens.labels("output", *labels).inc(count)
        for labels, amount in cost.items():
            metrics.cost.labels(*labels).inc(float(amount))
        for histogram in (durations, overheads, ttfts, upstreams):
            histogram.add_to_metric()


request_metrics = RequestMetrics()
