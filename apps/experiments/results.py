"""An experiment's results, computed in the database from the audit log (docs/experiments.md).

One grouped query gives every variant's counts, means and sums of squares (for the variances);
one query per variant gives its percentiles and their intervals with PostgreSQL's
``percentile_cont`` (on SQLite, the embedded default without it, the same interpolation over the
variant's sorted latencies, as analytics does); one grouped query gives the feedback. The tests
and intervals are scipy's, from those summary statistics.
"""

import functools
import math
from decimal import Decimal
from statistics import NormalDist
from typing import Any

from django.db.models import Avg, Count, F, FloatField, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Cast

from apps.audit.models import AuditEntry
from apps.core.percentiles import percentiles_for

from .models import Experiment, Feedback

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
POWER = 0.8
# The effect the minimum sample size is computed for: Cohen's "small" effect, h = 0.2 for a rate
# (arcsine difference) and d = 0.2 for a mean (difference over the pooled standard deviation).
EFFECT_SIZE = 0.2


@functools.cache
def _scipy_stats():
    """SciPy's statistics (with NumPy, 74 MiB), loaded on the first results page, not with the
    management URLs a server process loads for its first console page or health check."""
    from scipy import stats

    return stats


@functools.cache
def _z() -> float:
    """The two-sided z for the confidence level."""
    return _scipy_stats().norm.ppf(1 - ALPHA / 2)


# The minimum sample sizes (whole numbers: the standard library's normal quantiles give the same).
_Z_SUM = NormalDist().inv_cdf(1 - ALPHA / 2) + NormalDist().inv_cdf(POWER)
MIN_N_RATE = math.ceil((_Z_SUM / EFFECT_SIZE) ** 2)
MIN_N_MEAN = math.ceil(2 * (_Z_SUM / EFFECT_SIZE) ** 2)

NOT_ENOUGH_DATA = "not enough data"
NO_DIFFERENCE = "no difference"
BETTER = "variant better"
WORSE = "variant worse"

_CENT = Decimal("0.00000001")


def _float(name: str):
    return Cast(F(name), FloatField())


def _squares(name: str):
    return Sum(_float(name) * _float(name))


def experiment_results(experiment: Experiment) -> dict[str, Any]:
    variants = list(experiment.variants.order_by("position"))
    entries = AuditEntry.objects.filter(
        organization_id=experiment.organization_id, experiment_id=experiment.id
    ).order_by()
    rows = {
        row["experiment_variant"]: row
        for row in entries.values("experiment_variant").annotate(
            n=Count("id"),
            errors=Count("id", filter=Q(status__gte=400)),
            latency_mean=Avg("latency_ms"),
            latency_sq=_squares("latency_ms"),
            input_mean=Avg(_float("input_tokens")),
            input_sq=_squares("input_tokens"),
            output_mean=Avg(_float("output_tokens")),
            output_sq=_squares("output_tokens"),
            cost_sum=Sum("cost_usd"),
            cost_sq=_squares("cost_usd"),
            ttft_n=Count("id", filter=Q(stream=True, ttft_ms__isnull=False)),
        )
    }
    feedback = _feedback(experiment, entries)
    summaries = []
    for variant in variants:
        row = rows.get(variant.name) or {}
        of_variant = entries.filter(experiment_variant=variant.name)
        summaries.append(_summary(variant, row, feedback.get(variant.name) or {}, of_variant))
    comparisons = []
    control = summaries[0] if summaries else None
    for summary in summaries[1:]:
        found = _comparisons(control, summary)
        summary["verdict"] = _variant_verdict(found)
        comparisons.extend(found)
    verdict, best = _overall(summaries[1:])
    return {
        "experiment": {"id": str(experiment.id), "name": experiment.name},
        "status": experiment.status,
        "confidence": CONFIDENCE,
        "minimum_sample_size": {
            "rates": MIN_N_RATE,
            "means": MIN_N_MEAN,
            "effect_size": EFFECT_SIZE,
            "power": POWER,
            "alpha": ALPHA,
        },
        "variants": [_public(summary) for summary in summaries],
        "comparisons": comparisons,
        "verdict": verdict,
        "best_variant": best,
    }


# --- Per variant -----------------------------------------------------------------------------------


def _summary(variant, row: dict, feedback: dict, entries) -> dict:
    n = row.get("n", 0)
    errors = row.get("errors", 0)
    cost_sum = row.get("cost_sum") or Decimal(0)
    quantiles = _quantiles(entries, n, row.get("ttft_n", 0)) if n else {}
    latency = _moments(n, row.get("latency_mean"), row.get("latency_sq"))
    cost = _moments(n, float(cost_sum) / n if n else None, row.get("cost_sq"))
    scored = feedback.get("scored", 0)
    score = _moments(scored, feedback.get("mean"), feedback.get("sq"))
    return {
        "name": variant.name,
        "control": variant.position == 0,
        "weight": variant.weight,
        "requests": n,
        "errors": errors,
        "error_rate": errors / n if n else None,
        "error_rate_ci95": _wilson(errors, n),
        "latency_ms": {
            "p50": quantiles.get("p50"),
            "p50_ci95": quantiles.get("p50_ci95"),
            "p95": quantiles.get("p95"),
            "p95_ci95": quantiles.get("p95_ci95"),
            "mean": latency["mean"],
            "mean_ci95": latency["ci95"],
        },
        "ttft_ms": {
            "count": row.get("ttft_n", 0),
            "p50": quantiles.get("ttft_p50"),
            "p50_ci95": quantiles.get("ttft_p50_ci95"),
        },
        "input_tokens": _public_moments(_moments(n, row.get("input_mean"), row.get("input_sq"))),
        "output_tokens": _public_moments(_moments(n, row.get("output_mean"), row.get("output_sq"))),
        "cost_usd": str(cost_sum.quantize(_CENT)),
        "cost_per_request_usd": _money(cost_sum / n) if n else None,
        "cost_per_request_ci95_usd": [_money(bound) for bound in cost["ci95"]] if cost["ci95"] else None,
        "feedback": {
            "count": feedback.get("count", 0),
            "scored": scored,
            "mean": score["mean"],
            "mean_ci95": score["ci95"],
        },
        "verdict": None,
        # For the comparisons, not shown.
        "_latency": latency,
        "_cost": cost,
        "_score": score,
    }


def _public(summary: dict) -> dict:
    return {name: value for name, value in summary.items() if not name.startswith("_")}


def _public_moments(moments: dict) -> dict:
    return {"mean": moments["mean"], "mean_ci95": moments["ci95"]}


def _money(value) -> str:
    return str(Decimal(value).quantize(_CENT))


def _moments(n: int, mean, sum_of_squares) -> dict:
    """Mean, sample variance (from the sum of squares) and the t-interval of the mean."""
    if not n or mean is None:
        return {"n": n, "mean": None, "variance": None, "ci95": None}
    mean = float(mean)
    if n < 2 or sum_of_squares is None:
        return {"n": n, "mean": mean, "variance": None, "ci95": None}
    variance = max((float(sum_of_squares) - n * mean * mean) / (n - 1), 0.0)
    half = _scipy_stats().t.ppf(1 - ALPHA / 2, n - 1) * math.sqrt(variance / n)
    return {"n": n, "mean": mean, "variance": variance, "ci95": [mean - half, mean + half]}


def _wilson(k: int, n: int) -> list[float] | None:
    if not n:
        return None
    p = k / n
    z = _z()
    denominator = 1 + z**2 / n
    center = (p + z**2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n * n)) / denominator
    return [max(center - half, 0.0), min(center + half, 1.0)]


def quantile_fractions(q: float, n: int) -> tuple[float, float]:
    """The fractions whose values bound the q-quantile with 95 % confidence: the order statistics
    q ± z·sqrt(q(1-q)/n) (distribution-free; normal approximation to the binomial)."""
    half = _z() * math.sqrt(q * (1 - q) / n)
    return max(q - half, 0.0), min(q + half, 1.0)


def _quantiles(entries, n: int, ttft_n: int) -> dict:
    wanted = {"p50": ("latency_ms", 0.5, n, None), "p95": ("latency_ms", 0.95, n, None)}
    if ttft_n:
        wanted["ttft_p50"] = ("ttft_ms", 0.5, ttft_n, Q(stream=True, ttft_ms__isnull=False))
    fractions = {}
    for name, (column, q, count, condition) in wanted.items():
        low, high = quantile_fractions(q, count)
        fractions[name] = (column, q, condition)
        fractions[f"{name}_low"] = (column, low, condition)
        fractions[f"{name}_high"] = (column, high, condition)
    percentiles = percentiles_for(entries)
    values = entries.aggregate(**percentiles.aggregates(fractions)) | percentiles.totals(entries, fractions)
    result = {}
    for name in wanted:
        result[name] = values[name]
        result[f"{name}_ci95"] = [values[f"{name}_low"], values[f"{name}_high"]]
    return result


def _feedback(experiment: Experiment, entries) -> dict[str, dict]:
    variant_of = AuditEntry.objects.filter(
        organization_id=experiment.organization_id, id=OuterRef("request_id")
    ).values("experiment_variant")[:1]
    rows = (
        Feedback.objects.filter(
            organization_id=experiment.organization_id, request_id__in=entries.values("id")
        )
        .annotate(variant=Subquery(variant_of))
        .values("variant")
        .annotate(
            count=Count("id"),
            scored=Count("score"),
            mean=Avg("score"),
            sq=Sum(F("score") * F("score")),
        )
        .order_by()
    )
    return {row["variant"]: row for row in rows}


# --- Comparisons -----------------------------------------------------------------------------------


def _comparisons(control: dict, variant: dict) -> list[dict]:
    return [
        _rate_comparison(control, variant),
        _mean_comparison(control, variant, "latency_ms_mean", "_latency", lower_is_better=True),
        _mean_comparison(control, variant, "cost_per_request_usd", "_cost", lower_is_better=True),
        _mean_comparison(control, variant, "feedback_score", "_score", lower_is_better=False),
    ]


def _verdict(n1: int, n2: int, minimum: int, p_value, difference, lower_is_better: bool) -> str:
    if min(n1, n2) < minimum or p_value is None:
        return NOT_ENOUGH_DATA
    if p_value >= ALPHA or difference == 0:
        return NO_DIFFERENCE
    return BETTER if (difference < 0) == lower_is_better else WORSE


def _rate_comparison(control: dict, variant: dict) -> dict:
    n1, k1, n2, k2 = control["requests"], control["errors"], variant["requests"], variant["errors"]
    result = {
        "variant": variant["name"],
        "metric": "error_rate",
        "better": "lower",
        "test": "two-proportion z-test",
        "control": control["error_rate"],
        "value": variant["error_rate"],
        "difference": None,
        "difference_ci95": None,
        "p_value": None,
        "minimum_sample_size": MIN_N_RATE,
    }
    if n1 and n2:
        p1, p2 = k1 / n1, k2 / n2
        difference = p2 - p1
        pooled = (k1 + k2) / (n1 + n2)
        se_pooled = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
        # Both rates 0 (or both 1): no evidence of any difference.
        p_value = 1.0 if se_pooled == 0 else float(2 * _scipy_stats().norm.sf(abs(difference) / se_pooled))
        half = _z() * math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
        result |= {
            "difference": difference,
            "difference_ci95": [difference - half, difference + half],
            "p_value": p_value,
        }
    result["verdict"] = _verdict(n1, n2, MIN_N_RATE, result["p_value"], result["difference"], True)
    return result


def _mean_comparison(control: dict, variant: dict, metric: str, key: str, *, lower_is_better: bool) -> dict:
    a, b = control[key], variant[key]
    money = metric == "cost_per_request_usd"
    result = {
        "variant": variant["name"],
        "metric": metric,
        "better": "lower" if lower_is_better else "higher",
        "test": "Welch's t-test",
        "control": a["mean"],
        "value": b["mean"],
        "difference": None,
        "difference_ci95": None,
        "p_value": None,
        "minimum_sample_size": MIN_N_MEAN,
    }
    if a["variance"] is not None and b["variance"] is not None:
        difference = b["mean"] - a["mean"]
        se2a, se2b = a["variance"] / a["n"], b["variance"] / b["n"]
        if se2a + se2b == 0:
            p_value, half = (1.0 if difference == 0 else 0.0), 0.0
        else:
            p_value = float(
                _scipy_stats()
                .ttest_ind_from_stats(
                    b["mean"],
                    math.sqrt(b["variance"]),
                    b["n"],
                    a["mean"],
                    math.sqrt(a["variance"]),
                    a["n"],
                    equal_var=False,
                )
                .pvalue
            )
            df = (se2a + se2b) ** 2 / (se2a**2 / (a["n"] - 1) + se2b**2 / (b["n"] - 1))
            half = _scipy_stats().t.ppf(1 - ALPHA / 2, df) * math.sqrt(se2a + se2b)
        result |= {
            "difference": difference,
            "difference_ci95": [difference - half, difference + half],
            "p_value": p_value,
        }
    result["verdict"] = _verdict(
        a["n"], b["n"], MIN_N_MEAN, result["p_value"], result["difference"], lower_is_better
    )
    if money:
        for name in ("control", "value", "difference"):
            if result[name] is not None:
                result[name] = _money(result[name])
        if result["difference_ci95"] is not None:
            result["difference_ci95"] = [_money(bound) for bound in result["difference_ci95"]]
    return result


def _variant_verdict(comparisons: list[dict]) -> str:
    """Worse if any decided comparison is worse; better if any is better; no difference when the
    error rate and latency comparisons are decided and neither; otherwise not enough data."""
    verdicts = {comparison["metric"]: comparison["verdict"] for comparison in comparisons}
    if WORSE in verdicts.values():
        return WORSE
    if BETTER in verdicts.values():
        return BETTER
    if verdicts["error_rate"] == NO_DIFFERENCE and verdicts["latency_ms_mean"] == NO_DIFFERENCE:
        return NO_DIFFERENCE
    return NOT_ENOUGH_DATA


def _overall(variants: list[dict]) -> tuple[str, str | None]:
    """Better when a variant is better (the best: the better one with the lowest error rate, then
    the lowest mean latency); not enough data while any other is undecided; worse when every variant
    is worse; otherwise no difference."""
    verdicts = [variant["verdict"] for variant in variants]
    better = [variant for variant in variants if variant["verdict"] == BETTER]
    if better:
        best = min(better, key=lambda v: (v["error_rate"], v["latency_ms"]["mean"] or 0))
        return BETTER, best["name"]
    if not verdicts or NOT_ENOUGH_DATA in verdicts:
        return NOT_ENOUGH_DATA, None
    if all(verdict == WORSE for verdict in verdicts):
        return WORSE, None
    return NO_DIFFERENCE, None
