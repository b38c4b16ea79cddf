"""The batched request metrics against prometheus-client's own histogram: the same buckets."""

import os
import uuid
from datetime import UTC, datetime

from apps.audit.records import Attempt, RequestRecord
from apps.core.preparation import run_steps
from apps.observability import metrics
from apps.observability.request_metrics import OTHER, BoundedValues, RequestMetrics, overhead_ms
from tests.metrics import metric_value


def record(endpoint: str, latency_ms: float, *, upstream_ms: float = 0.0, model: str = "m") -> RequestRecord:
    return RequestRecord(
        request_id=str(uuid.uuid4()),
        started_at=datetime.now(UTC),
        endpoint=endpoint,
        client_ip="127.0.0.1",
        user_agent="test",
        model=model,
        provider="openai",
        latency_ms=latency_ms,
        upstream_ms=upstream_ms,
        attempts=[Attempt("openai", "k", model, None, 200, "ok", upstream_ms)] if upstream_ms else [],
    )


def test_a_batch_fills_the_buckets_as_observing_one_by_one_would():
    endpoint = f"/v1/test-{uuid.uuid4().hex[:8]}"
    batch = RequestMetrics()
    # On a bound (inclusive, as Prometheus's "le"), just past it, and past the last bound.
    for latency_ms in (5.0, 5.001, 10.0, 400_000.0):
        batch.hand_off(record(endpoint, latency_ms, upstream_ms=latency_ms / 2))
    batch.flush()

    def bucket(le: str) -> float:
        return metric_value("gateway_request_duration_seconds_bucket", endpoint=endpoint, le=le)

    assert bucket("0.005") == 1
    assert bucket("0.01") == 3
    assert bucket("300.0") == 3
    assert bucket("+Inf") == 4
    assert metric_value("gateway_request_duration_seconds_count", endpoint=endpoint) == 4
    assert metric_value("gateway_request_duration_seconds_sum", endpoint=endpoint) == (
        sum((5.0, 5.001, 10.0, 400_000.0)) / 1000
    )
    # The gateway's part: the duration less the upstream's.
    assert metric_value("gateway_overhead_seconds_bucket", endpoint=endpoint, le="0.005") == 3
    assert metrics.DURATION_BUCKETS[0] == 0.005


def test_model_labels_past_the_bound_read_other():
    bounded = BoundedValues(2)
    assert [bounded(v) for v in ("a", "b", "c", "a", "d")] == ["a", "b", OTHER, "a", OTHER]


def test_a_streams_overhead_ends_at_its_first_chunk():
    # 40 ms of generation after the first chunk are the model's, not the gateway's.
    assert overhead_ms(latency_ms=50.0, ttft_ms=10.0, upstream_ms=8.5) == 1.5
    assert overhead_ms(latency_ms=10.0, ttft_ms=None, upstream_ms=8.5) == 1.5


def test_a_nodes_preparation_clears_the_metrics_of_stopped_processes_only(settings, tmp_path):
    settings.GATEWAY_METRICS_DIR = str(tmp_path)
    stopped = tmp_path / "counter_4194303.db"  # past the largest pid Linux hands out
    running = tmp_path / f"histogram_{os.getpid()}.db"
    stopped.write_bytes(b"\0" * 8)
    running.write_bytes(b"\0" * 8)

    run_steps()  # manage.py prepare's steps of other apps

    assert not stopped.exists() and running.exists()
