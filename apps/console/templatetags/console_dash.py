"""Filters of the dashboard, log and live tail pages."""

import json
from decimal import Decimal, InvalidOperation

from django import template

register = template.Library()


@register.filter
def dollars(value) -> str:
    """Money for reading: "$1,234.50" from a dollar up, "$0.0000042" below (to 8 places), "$0"."""
    if value is None or value == "":
        return ""
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError, TypeError):
        return str(value)
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    amount = amount.quantize(Decimal("0.00000001"))
    return "$0" if amount == 0 else f"${amount.normalize():f}"


@register.filter
def count(value) -> str:
    """A whole number with thousands separators: 677520 -> "677,520"."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)


@register.filter
def rate(value) -> str:
    """A share from 0 to 1 as a percentage: 0.1234 -> "12.3%"; "—" for None."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.1f}%"


@register.filter
def ms(value) -> str:
    """Milliseconds: 1234.5 -> "1,234.5 ms"; "—" for None (no requests, or not a stream)."""
    if value is None or value == "":
        return "—"
    return f"{float(value):,.1f} ms"


@register.filter
def burn_level(percent) -> str:
    """ok below 80 % of a budget, warn up to 100 %, over beyond."""
    if percent is None:
        return "ok"
    return "ok" if percent < 80 else "warn" if percent < 100 else "over"


@register.filter
def pretty_json(text) -> str:
    """A body kept as JSON, indented for reading; any other text as it is. (Escaped by the template.)"""
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return text


@register.filter
def status_class(status) -> str:
    """The colour of an HTTP status in a table: succeeded, pending (4xx) or failed (5xx)."""
    try:
        status = int(status)
    except (TypeError, ValueError):
        return ""
    return "succeeded" if status < 400 else "pending" if status < 500 else "failed"
