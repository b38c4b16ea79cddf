"""Filters of the dashboard, log and live tail pages."""

import json
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from django import template

from apps.audit.selectors import CACHE_TIERS

register = template.Library()


def _rounded(value: Decimal, places: int) -> Decimal:
    """Halves away from zero, as a browser's ``toFixed`` rounds (ConsoleFormat in console.js): the
    live tail's and the playground's figures must read as the pages' do."""
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _decimal(value) -> Decimal | None:
    """A finite amount of a plausible size, else None (shown as it is, or as a dash)."""
    try:
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError, TypeError):
        return None
    return number if number.is_finite() and abs(number) < Decimal("1e15") else None


@register.filter
def dollars(value) -> str:
    """Money for reading: "$1,234.56" from a dollar up, two significant digits below ("$0.50",
    "$0.015", "$0.0002"), "$0". Entries' pages and exports show the exact amount beside it."""
    if value is None or value == "":
        return ""
    amount = _decimal(value)
    if amount is None:
        return str(value)
    if amount == 0:
        return "$0"
    sign, amount = ("-" if amount < 0 else ""), abs(amount)
    if amount < 1:
        places = max(2, 1 - amount.adjusted())  # two significant digits, at least cents
        amount = _rounded(amount, places)
    if amount >= 1:
        return f"{sign}${_rounded(amount, 2):,.2f}"
    whole, _, fraction = f"{amount:f}".partition(".")
    return f"{sign}${whole}.{fraction.rstrip('0').ljust(2, '0')}"


@register.filter
def count(value) -> str:
    """A whole number with thousands separators: 677520 -> "677,520"."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)


@register.filter
def compact(value) -> str:
    """A count at a glance: 950, "12.3k", "677k", "1.2M" (the exact number goes in a title)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    units = ((10**9, "B"), (10**6, "M"), (10**3, "k"))
    for index, (size, suffix) in enumerate(units):
        if abs(number) < size:
            continue
        scaled = _rounded(Decimal(number) / size, 1 if abs(number) < 100 * size else 0)
        if abs(scaled) >= 1000 and index > 0:  # 999,950 reads "1M", not "1000k"
            size, suffix = units[index - 1]
            scaled = _rounded(Decimal(number) / size, 1)
        return f"{scaled:f}".removesuffix(".0") + suffix
    return str(number)


@register.filter
def rate(value) -> str:
    """A share from 0 to 1 as a percentage: 0.1234 -> "12.3%"; "—" for None."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.1f}%"


@register.filter
def ms(value) -> str:
    """A duration given in milliseconds, in the unit that reads best: "0.4 ms", "85 ms", "1.25 s",
    "2 min 5 s"; "—" for None (no requests, or not a stream)."""
    milliseconds = None if value is None or value == "" else _decimal(value)
    if milliseconds is None:
        return "—"
    if milliseconds < Decimal("9.95"):
        return f"{_rounded(milliseconds, 1)} ms"
    if milliseconds < Decimal("999.5"):
        return f"{_rounded(milliseconds, 0)} ms"
    seconds = milliseconds / 1000
    if seconds < Decimal("9.995"):
        return f"{_rounded(seconds, 2)} s"
    if seconds < Decimal("59.95"):
        return f"{_rounded(seconds, 1)} s"
    minutes, seconds = divmod(int(_rounded(seconds, 0)), 60)
    return f"{minutes} min {seconds} s"


@register.filter
def burn_level(percent) -> str:
    """ok below 80 % of a budget, warn up to 100 %, over beyond."""
    if percent is None:
        return "ok"
    return "ok" if percent < 80 else "warn" if percent < 100 else "over"


# A body longer than this is folded on an entry's page (opened on request).
LONG_BODY_LINES = 40
LONG_BODY_CHARACTERS = 6000


@register.filter
def readable_body(text) -> dict:
    """A kept body for reading: indented if JSON, each embedding vector replaced by its size (a
    response of 1,536-number vectors, or their base64, is pages of digits nobody reads), and whether
    it is long enough to fold. ``summary`` says what was summarised."""
    if not text:
        return {"text": "", "summary": "", "lines": 0, "long": False}
    summary = ""
    try:
        body = json.loads(text)
    except (TypeError, ValueError):
        readable = text
    else:
        summary = _summarise_embeddings(body)
        readable = json.dumps(body, indent=2, ensure_ascii=False)
    lines = readable.count("\n") + 1
    return {
        "text": readable,
        "summary": summary,
        "lines": lines,
        "long": lines > LONG_BODY_LINES or len(readable) > LONG_BODY_CHARACTERS,
    }


def _summarise_embeddings(body) -> str:
    """Replaces the vectors of an embeddings response in place; says how many and of what size."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return ""
    sizes = []
    for item in body["data"]:
        if not isinstance(item, dict) or "embedding" not in item:
            continue
        vector = item["embedding"]
        if isinstance(vector, list):
            sizes.append(len(vector))
            item["embedding"] = f"[{len(vector):,} numbers]"
        elif isinstance(vector, str):
            dimensions = len(vector) * 3 // 4 // 4  # base64 of float32 values
            sizes.append(dimensions)
            item["embedding"] = f"[base64, about {dimensions:,} numbers]"
    if not sizes:
        return ""
    dimensions = ", ".join(f"{size:,}" for size in sorted(set(sizes)))
    noun = "embedding" if len(sizes) == 1 else "embeddings"
    return f"{len(sizes)} {noun} of {dimensions} dimensions (vectors not shown)"


@register.filter
def status_class(status) -> str:
    """The colour of an HTTP status in a table: succeeded, pending (4xx) or failed (5xx)."""
    try:
        status = int(status)
    except (TypeError, ValueError):
        return ""
    return "succeeded" if status < 400 else "pending" if status < 500 else "failed"


@register.filter
def cache_hit(cache) -> bool:
    """Whether an entry's cache value is a hit (of any tier): answered without an upstream."""
    return cache in CACHE_TIERS
