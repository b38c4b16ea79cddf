"""Results from the audit log, checked against a hand computation from the test's own entries
(numpy and the formulas written out here, not the code under test)."""

import math
import statistics
import uuid
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats

from apps.experiments import services
from apps.experiments.models import Feedback
from tests.audit.entries import AuditEntryFactory

from .conftest import model_experiment

Z = 1.959963984540054


def entries(organization, experiment, variant: str, rows: list[dict]) -> list:
    made = []
    for row in rows:
        made.append(
            AuditEntryFactory(
                organization=organization, experiment_id=experiment.id, experiment_variant=variant, **row
            )
        )
    return made


CONTROL = [
    {
        "latency_ms": 100.0,
        "status": 200,
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": Decimal("0.00010000"),
    },
    {
        "latency_ms": 120.0,
        "status": 200,
        "input_tokens": 12,
        "output_tokens": 7,
        "cost_usd": Decimal("0.00012000"),
    },
    {"latency_ms": 140.0, "status": 500, "input_tokens": 14, "output_tokens": 0, "cost_usd": Decimal("0")},
    {
        "latency_ms": 90.0,
        "status": 200,
        "input_tokens": 9,
        "output_tokens": 6,
        "cost_usd": Decimal("0.00009000"),
        "stream": True,
        "ttft_ms": 30.0,
    },
    {
        "latency_ms": 300.0,
        "status": 429,
        "input_tokens": 20,
        "output_tokens": 0,
        "cost_usd": Decimal("0"),
        "stream": True,
        "ttft_ms": 50.0,
    },
]
LARGE = [
    {
        "latency_ms": 200.0,
        "status": 200,
        "input_tokens": 10,
        "output_tokens": 8,
        "cost_usd": Decimal("0.00050000"),
    },
    {
        "latency_ms": 260.0,
        "status": 200,
        "input_tokens": 11,
        "output_tokens": 9,
        "cost_usd": Decimal("0.00060000"),
        "stream": True,
        "ttft_ms": 80.0,
    },
    {
        "latency_ms": 230.0,
        "status": 200,
        "input_tokens": 13,
        "output_tokens": 10,
        "cost_usd": Decimal("0.00070000"),
    },
]


def wilson(k, n):
    p = k / n
    center = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z / (1 + Z * Z / n) * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return center - half, center + half


def t_interval(values):
    mean, n = statistics.fmean(values), len(values)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


def approx(value, rel=1e-6):
    return pytest.approx(value, rel=rel, abs=1e-9)


@pytest.fixture
def experiment(organization, aliases):
    experiment = model_experiment(organization)
    services.experiment_start(experiment=experiment)
    return experiment


def test_the_numbers_match_a_hand_computation(session_client, organization, outsider, experiment):
    control_rows = entries(organization, experiment, "control", CONTROL)
    large_rows = entries(organization, experiment, "large", LARGE)
    # Noise that must not count: another experiment's entries, entries without one, another organization's.
    AuditEntryFactory(organization=organization, experiment_id=uuid.uuid4(), experiment_variant="control")
    AuditEntryFactory(organization=organization, latency_ms=9999)
    AuditEntryFactory(
        organization=outsider.organization, experiment_id=experiment.id, experiment_variant="control"
    )
    scores = {
        control_rows[0].id: 1.0,
        control_rows[1].id: 0.0,
        control_rows[3].id: 1.0,
        large_rows[0].id: 1.0,
    }
    for request_id, score in scores.items():
        Feedback.objects.create(organization=organization, request_id=request_id, score=score)
    Feedback.objects.create(organization=organization, request_id=large_rows[1].id, label="too long")

    results = session_client.get(f"/api/v1/experiments/{experiment.id}/results").json()
    assert results["experiment"]["id"] == str(experiment.id) and results["status"] == "running"
    control, large = results["variants"]

    latencies = [row["latency_ms"] for row in CONTROL]
    assert control["name"] == "control" and control["control"] is True
    assert control["requests"] == 5 and control["errors"] == 2
    assert control["error_rate"] == approx(0.4)
    assert control["error_rate_ci95"] == [approx(b) for b in wilson(2, 5)]
    assert control["latency_ms"]["p50"] == approx(np.percentile(latencies, 50))
    assert control["latency_ms"]["p95"] == approx(np.percentile(latencies, 95))
    low, high = 0.5 - Z * math.sqrt(0.25 / 5), 0.5 + Z * math.sqrt(0.25 / 5)
    assert control["latency_ms"]["p50_ci95"] == [
        approx(np.percentile(latencies, 100 * max(low, 0))),
        approx(np.percentile(latencies, 100 * min(high, 1))),
    ]
    assert control["latency_ms"]["mean"] == approx(statistics.fmean(latencies))
    assert control["latency_ms"]["mean_ci95"] == [approx(b) for b in t_interval(latencies)]
    assert control["ttft_ms"]["count"] == 2 and control["ttft_ms"]["p50"] == approx(40.0)
    assert control["input_tokens"]["mean"] == approx(13.0)
    assert control["input_tokens"]["mean_ci95"] == [approx(b) for b in t_interval([10, 12, 14, 9, 20])]
    assert control["output_tokens"]["mean"] == approx(3.6)
    assert control["cost_usd"] == "0.00031000"
    assert control["cost_per_request_usd"] == "0.00006200"
    costs = [float(row["cost_usd"]) for row in CONTROL]
    assert [Decimal(b) for b in control["cost_per_request_ci95_usd"]] == [
        Decimal(b).quantize(Decimal("0.00000001")) for b in t_interval(costs)
    ]
    assert control["feedback"]["count"] == 3 and control["feedback"]["scored"] == 3
    assert control["feedback"]["mean"] == approx(2 / 3)
    assert control["feedback"]["mean_ci95"] == [approx(b) for b in t_interval([1.0, 0.0, 1.0])]
    assert large["requests"] == 3 and large["errors"] == 0 and large["error_rate"] == 0
    assert large["feedback"] == {"count": 2, "scored": 1, "mean": 1.0, "mean_ci95": None}
    assert large["cost_per_request_usd"] == "0.00060000"

    by_metric = {c["metric"]: c for c in results["comparisons"]}
    assert set(by_metric) == {"error_rate", "latency_ms_mean", "cost_per_request_usd", "feedback_score"}
    rate = by_metric["error_rate"]
    assert rate["variant"] == "large" and rate["difference"] == approx(-0.4)
    pooled = 2 / 8
    z = 0.4 / math.sqrt(pooled * (1 - pooled) * (1 / 5 + 1 / 3))
    assert rate["p_value"] == approx(2 * (1 - stats.norm.cdf(z)))
    half = Z * math.sqrt(0.4 * 0.6 / 5)
    assert rate["difference_ci95"] == [approx(-0.4 - half), approx(-0.4 + half)]
    assert rate["minimum_sample_size"] == 197 and rate["verdict"] == "not enough data"

    latency = by_metric["latency_ms_mean"]
    welch = stats.ttest_ind([r["latency_ms"] for r in LARGE], latencies, equal_var=False)
    assert latency["p_value"] == approx(welch.pvalue, rel=1e-5)
    assert latency["difference"] == approx(statistics.fmean([200, 260, 230]) - statistics.fmean(latencies))
    assert latency["minimum_sample_size"] == 393 and latency["verdict"] == "not enough data"
    assert by_metric["cost_per_request_usd"]["difference"] == "0.00053800"
    assert by_metric["feedback_score"]["p_value"] is None  # one score: no variance
    assert large["verdict"] == "not enough data" and control["verdict"] is None
    assert results["verdict"] == "not enough data" and results["best_variant"] is None


def many(organization, experiment, variant: str, latencies, status_of=lambda n: 200) -> None:
    from apps.audit.models import AuditEntry

    AuditEntry.objects.bulk_create(
        AuditEntryFactory.build(
            organization=organization,
            experiment_id=experiment.id,
            experiment_variant=variant,
            latency_ms=float(latency),
            status=status_of(n),
        )
        for n, latency in enumerate(latencies)
    )


def test_a_slower_variant_with_enough_data_is_worse(session_client, organization, experiment):
    many(organization, experiment, "control", [100 + n % 20 for n in range(400)])
    many(organization, experiment, "large", [130 + n % 20 for n in range(400)])
    results = session_client.get(f"/api/v1/experiments/{experiment.id}/results").json()
    by_metric = {c["metric"]: c for c in results["comparisons"]}
    assert by_metric["latency_ms_mean"]["verdict"] == "variant worse"
    assert by_metric["latency_ms_mean"]["p_value"] < 1e-6
    assert by_metric["error_rate"]["verdict"] == "no difference"  # both 0
    assert by_metric["feedback_score"]["verdict"] == "not enough data"
    assert results["variants"][1]["verdict"] == "variant worse" and results["verdict"] == "variant worse"


def test_a_variant_with_fewer_errors_is_better_and_equal_latency_is_no_difference(
    session_client, organization, experiment
):
    latencies = [100 + n % 20 for n in range(400)]
    many(organization, experiment, "control", latencies, status_of=lambda n: 500 if n % 5 == 0 else 200)
    many(organization, experiment, "large", latencies, status_of=lambda n: 500 if n % 50 == 0 else 200)
    results = session_client.get(f"/api/v1/experiments/{experiment.id}/results").json()
    by_metric = {c["metric"]: c for c in results["comparisons"]}
    assert by_metric["error_rate"]["verdict"] == "variant better"
    assert by_metric["latency_ms_mean"]["verdict"] == "no difference"
    assert results["verdict"] == "variant better" and results["best_variant"] == "large"


def test_an_experiment_without_traffic_has_empty_results(session_client, experiment):
    results = session_client.get(f"/api/v1/experiments/{experiment.id}/results").json()
    assert [v["requests"] for v in results["variants"]] == [0, 0]
    assert results["variants"][0]["latency_ms"]["p50"] is None
    assert results["verdict"] == "not enough data"
