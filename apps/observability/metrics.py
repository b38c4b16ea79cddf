"""The gateway's Prometheus metrics, shared by every process of a node.

Every process that Django sets up (each server process, the Celery worker, the ingest) writes its
values to memory-mapped files in ``GATEWAY_METRICS_DIR`` (prometheus-client's multiprocess mode), and
``/metrics`` (exposition.py) sums them: a scrape sees the whole node, whichever server process
answers it. Counters of a process that has exited stay in the sum; its gauges leave it.

What a proxy request moves (requests, durations, tokens, cost, cache, policy, upstream errors) is
read off its record in batches (request_metrics.py), never on the request itself. The rare events
(a budget refusal, a breaker opening, a webhook delivery, a dead letter) are counted where they
happen, with the helpers below.

Labels are bounded: an endpoint of the proxy's routes, a model of at most ``GATEWAY_METRICS_MAX_MODELS``
names per process (then ``other``), a provider, a status; an organization only with
``GATEWAY_METRICS_PER_ORGANIZATION=true``; never a key, a user or a prompt.
"""

import contextlib
import glob
import os
import re
from pathlib import Path

from django.conf import settings

# prometheus-client reads this when it is imported: the node's directory, never one a parent
# process's environment named (a test's or the bench's own).
os.environ["PROMETHEUS_MULTIPROC_DIR"] = settings.GATEWAY_METRICS_DIR
Path(settings.GATEWAY_METRICS_DIR).mkdir(parents=True, exist_ok=True)

from prometheus_client import Counter, Gauge, Histogram, values  # noqa: E402
from prometheus_client.multiprocess import mark_process_dead  # noqa: E402

# Imported earlier by someone else, prometheus-client chose its one-process values: choose again.
values.ValueClass = values.get_value_class()

PREFIX = settings.GATEWAY_BRAND
PER_ORGANIZATION = settings.GATEWAY_METRICS_PER_ORGANIZATION
_ORGANIZATION = ("organization",) if PER_ORGANIZATION else ()

# Seconds. A whole answer from a model takes from milliseconds (a cache hit) to minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# What the gateway adds: well under a millisecond to tens of milliseconds.
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

requests = Counter(
    f"{PREFIX}_requests",
    "Proxy requests answered, by endpoint, model, provider and HTTP status.",
    ("endpoint", "model", "provider", "status", *_ORGANIZATION),
)
request_duration = Histogram(
    f"{PREFIX}_request_duration_seconds",
    "From a proxy request's arrival until its answer was sent (a stream's last chunk).",
    ("endpoint",),
    buckets=DURATION_BUCKETS,
)
overhead = Histogram(
    f"{PREFIX}_overhead_seconds",
    "What the gateway added to a proxy request: its duration less the upstream's.",
    ("endpoint",),
    buckets=OVERHEAD_BUCKETS,
)
ttft = Histogram(
    f"{PREFIX}_ttft_seconds",
    "Streams: from the request's arrival until the first chunk was sent.",
    ("endpoint",),
    buckets=DURATION_BUCKETS,
)
upstream_duration = Histogram(
    f"{PREFIX}_upstream_duration_seconds",
    "One upstream attempt, until its answer (a stream: its first chunk), or its failure.",
    ("provider",),
    buckets=DURATION_BUCKETS,
)
tokens = Counter(
    f"{PREFIX}_tokens",
    "Tokens of the answered requests, input (the prompt) and output (the completion).",
    ("direction", *_ORGANIZATION),
)
cost = Counter(
    f"{PREFIX}_cost_usd",
    "What the answered requests cost, in US dollars, at the catalog's prices, by provider.",
    ("provider", *_ORGANIZATION),
)
cache_requests = Counter(
    f"{PREFIX}_cache_requests",
    "Proxy requests by cache result: l1, l2, l3 (hits), miss, bypass.",
    ("result", *_ORGANIZATION),
)
policy_actions = Counter(
    f"{PREFIX}_policy_actions",
    "Requests a policy acted on, by action (blocked, redacted, flagged).",
    ("action",),
)
budget_refusals = Counter(
    f"{PREFIX}_budget_refusals",
    "Requests refused for a budget, by the budget's scope (api_key, team, organization).",
    ("scope",),
)
rate_limited = Counter(
    f"{PREFIX}_rate_limited",
    "Requests refused by a rate limit (429), by the limit's scope (api_key, team, organization).",
    ("scope",),
)
upstream_errors = Counter(
    f"{PREFIX}_upstream_errors",
    "Upstream attempts that failed, by provider and category (upstream_error, client_error, "
    "timeout, connection_error, invalid_response).",
    ("provider", "category"),
)
breaker_open = Gauge(
    f"{PREFIX}_breaker_open",
    "1 while a provider key's circuit breaker keeps requests from it in some server process.",
    ("provider", "provider_key_id"),
    multiprocess_mode="livemax",
)
outbox_dead_letters = Counter(
    f"{PREFIX}_outbox_dead_letters",
    "Spooled items the database refused, set aside in the dead-letter file (manage.py outbox_replay).",
    ("kind",),
)
webhook_deliveries = Counter(
    f"{PREFIX}_webhook_deliveries",
    "Webhook delivery attempts, by outcome (succeeded, failed).",
    ("status",),
)


# Every metric has labels: a process that never counts (a management command) writes no files.


def budget_refused(scope: str) -> None:
    budget_refusals.labels(scope).inc()


def rate_limit_refused(scope: str) -> None:
    rate_limited.labels(scope).inc()


def breaker_shown(provider: str, provider_key_id: str, *, is_open: bool) -> None:
    breaker_open.labels(provider, provider_key_id).set(1 if is_open else 0)


def dead_lettered(kind: str, count: int) -> None:
    outbox_dead_letters.labels(kind).inc(count)


def webhook_delivered(*, succeeded: bool) -> None:
    webhook_deliveries.labels("succeeded" if succeeded else "failed").inc()


_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db$")


def forget_dead_processes() -> None:
    """Drops the gauges of processes that ended without saying so (killed): a breaker shown open by
    a process that is gone would stay open on the dashboards. Their counters stay in the sums. Run
    as a process starts, before it sets a gauge: files under its own pid are a dead process's too
    (a pid used again)."""
    for path in glob.glob(os.path.join(settings.GATEWAY_METRICS_DIR, "gauge_live*_*.db")):
        match = _LIVE_GAUGE_FILE.search(path)
        if match and (int(match.group(1)) == os.getpid() or not _alive(int(match.group(1)))):
            mark_process_dead(int(match.group(1)), settings.GATEWAY_METRICS_DIR)


_PROCESS_FILE = re.compile(r"_(\d+)\.db$")


def clear_stopped_processes() -> None:
    """The files of every process that is not running (a previous run's): ``manage.py prepare``
    starts a node's run with them gone, and leaves those of processes still running alone."""
    for path in glob.glob(os.path.join(settings.GATEWAY_METRICS_DIR, "*.db")):
        match = _PROCESS_FILE.search(path)
        if match and not _alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def forget_process(pid: int) -> None:
    """At a process's exit: its gauges leave the node's sums."""
    if pid == os.getpid():  # not a forked child's exit
        mark_process_dead(pid, settings.GATEWAY_METRICS_DIR)
