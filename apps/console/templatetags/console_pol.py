"""Filters of the policies, prompts, experiments and webhooks pages: numbers of an experiment's
results as people read them, JSON shown as it is stored, detectors by their names for people, and how
often a pending webhook delivery asks for its news."""

import json
import math
from datetime import timedelta

from django import template
from django.utils import timezone

from apps.console.templatetags.console_dash import dollars as readable_dollars
from apps.console.templatetags.console_dash import ms as readable_duration
from apps.core.detectors import DETECTOR_LABELS
from apps.policies.engine import CATEGORY_LABELS

register = template.Library()

NONE = "—"
# How each compared metric of an experiment's results reads.
METRICS = {
    "error_rate": ("Error rate", "percent"),
    "latency_ms_mean": ("Mean latency", "ms"),
    "cost_per_request_usd": ("Cost per request", "usd"),
    "feedback_score": ("Feedback score", "number"),
}


def _finite(value) -> float | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@register.filter
def number(value, digits=1) -> str:
    """``12.345`` -> ``12.3``; ``—`` for nothing."""
    found = _finite(value)
    if found is None:
        return NONE
    return f"{found:,.{int(digits)}f}"


@register.filter
def percent(value, digits=1) -> str:
    """A rate (0.125) as ``12.5 %``."""
    found = _finite(value)
    if found is None:
        return NONE
    return f"{found * 100:.{int(digits)}f} %"


@register.filter
def ms(value) -> str:
    """A duration as the dashboard writes one ("85 ms", "1.25 s"); ``—`` for nothing."""
    found = _finite(value)
    return NONE if found is None else readable_duration(found)


@register.filter
def dollars(value) -> str:
    """Money as the dashboard writes it ("$0.00015", "$1,234.56"); ``—`` for nothing. The exact
    amounts are the API's (and the exports')."""
    if _finite(value) is None:
        return NONE
    return readable_dollars(value)


def _format(value, kind: str) -> str:
    if kind == "percent":
        return percent(value, 2)
    if kind == "ms":
        return ms(value)
    if kind == "usd":
        return dollars(value)
    if kind == "pp":  # a difference of two rates, in percentage points
        found = _finite(value)
        return NONE if found is None else f"{found * 100:+.2f} pp"
    if kind == "signed":
        found = _finite(value)
        return NONE if found is None else f"{found:+,.3f}"
    return number(value, 3)


@register.filter
def interval(pair, kind="number") -> str:
    """A 95 % interval ``[low, high]`` as ``low to high`` in the unit ``kind`` (``percent``, ``ms``,
    ``usd``, ``pp``, ``number``); ``—`` while there is none."""
    if not pair or len(pair) != 2:
        return NONE
    return f"{_format(pair[0], kind)} to {_format(pair[1], kind)}"


@register.filter
def metric_label(metric: str) -> str:
    return METRICS.get(metric, (metric.replace("_", " ").capitalize(), "number"))[0]


@register.filter
def metric_value(value, metric: str) -> str:
    """A compared value (the control's or the variant's) in its metric's unit."""
    return _format(value, METRICS.get(metric, ("", "number"))[1])


@register.filter
def metric_difference(value, metric: str) -> str:
    """A variant's difference from the control, signed, in its metric's unit."""
    kind = METRICS.get(metric, ("", "number"))[1]
    if kind == "percent":
        return _format(value, "pp")
    if kind == "usd":
        formatted = dollars(value)
        return formatted if formatted.startswith(("-", NONE)) else f"+{formatted}"
    if kind == "ms":
        found = _finite(value)
        return NONE if found is None else f"{found:+,.1f} ms"
    return _format(value, "signed")


@register.filter
def difference_interval(pair, metric: str) -> str:
    kind = METRICS.get(metric, ("", "number"))[1]
    return interval(pair, "pp" if kind == "percent" else kind)


@register.filter
def p_value(value) -> str:
    found = _finite(value)
    if found is None:
        return NONE
    if found < 0.001:
        return "< 0.001"
    return f"{found:.3f}"


@register.filter
def verdict_class(verdict) -> str:
    """A CSS modifier for a verdict: ``better``, ``worse``, ``same`` or ``unknown``."""
    return {
        "variant better": "better",
        "variant worse": "worse",
        "no difference": "same",
    }.get(verdict, "unknown")


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@register.filter
def lookup(mapping, key):
    """``mapping[key]``, or None."""
    try:
        return mapping.get(key) if hasattr(mapping, "get") else mapping[key]
    except (KeyError, IndexError, TypeError):
        return None


@register.filter
def lines(values) -> str:
    """A list as the text of a one-item-per-line textarea."""
    return "\n".join(str(value) for value in values or ())


@register.filter
def as_str(value) -> str:
    return "" if value is None else str(value)


@register.filter
def getlist(form, name: str) -> list:
    """Every value a posted form sent under ``name`` (checkboxes)."""
    return form.getlist(name) if hasattr(form, "getlist") else []


@register.filter
def is_text(value) -> bool:
    return isinstance(value, str)


@register.filter
def detector_label(name: str) -> str:
    """``payment_card`` -> ``Payment card number``; an unknown name as it is."""
    return DETECTOR_LABELS.get(name, name)


@register.filter
def category_label(category: str) -> str:
    """What a policy decision matched, for people: a detector's label, or the other categories' names
    (``pattern``, ``term``, ``denied_model`` ...)."""
    return DETECTOR_LABELS.get(category) or CATEGORY_LABELS.get(category, category)


# A pending delivery's row asks again every second while an answer is likely soon (the transport's
# timeouts are 3 s and 5 s), then more slowly: an attempt that waits for the broker can stay pending
# for minutes, and a page left open should not ask every second all that time.
_FAST_POLLING = timedelta(seconds=30)


# A page stops asking this long after the attempt began: one still pending then waits on a worker or a
# broker that is down, and an open tab should not ask every ten seconds for hours. A reload shows it.
_POLLING_LIMIT = timedelta(minutes=10)


@register.filter
def delivery_poll(delivery) -> str:
    """The ``hx-trigger`` of a pending delivery's row or summary; empty when it is settled or has been
    pending past ``_POLLING_LIMIT`` (the page then stops asking)."""
    if delivery.is_settled:
        return ""
    age = timezone.now() - delivery.created_at
    if age >= _POLLING_LIMIT:
        return ""
    return "every 1s" if age < _FAST_POLLING else "every 10s"


@register.filter
def delivery_failure(delivery) -> str:
    """Why a failed attempt failed, in a few words (``connection refused``); for an attempt recorded
    before the reason was, the start of its error."""
    if delivery.failure_reason:
        return delivery.failure_reason
    first_line = (delivery.error or "").strip().splitlines()[:1]
    return first_line[0][:60] if first_line else NONE
