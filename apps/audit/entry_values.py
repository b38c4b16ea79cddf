"""Every value of an audit entry made acceptable to the database before it is written.

The audit log promises one entry per request whatever the client sent, so nothing a client controls
may make an insert fail: PostgreSQL refuses a NUL in text and in jsonb, a lone surrogate cannot be
encoded, ``inet`` refuses what is not an address, ``varchar(n)`` refuses a longer string, and
integer columns have ranges. A refused row would fall out of the log and out of the spend totals
(one bad row is isolated from its batch, but it is still lost). Here every field of a payload is
validated and normalised instead: invalid addresses become null, NULs are removed, lone surrogates
become U+FFFD, strings are cut to their column, numbers are clamped to theirs.
"""

import ipaddress
import math
import uuid
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from django.db import models

from apps.core.storable import json_value, text, uuid_text

from .models import AuditEntry

_TEXT_LIMITS: dict[str, int | None] = {
    field.attname: field.max_length
    for field in AuditEntry._meta.concrete_fields
    if isinstance(field, models.CharField | models.TextField)
}
_SMALL = 32767  # PositiveSmallIntegerField, on every database
_INTEGER = 2147483647  # PositiveIntegerField
# Below DecimalField(max_digits=18, decimal_places=8)'s limit: SQLite keeps decimals as floats, and
# a cost that rounds up to 1e10 there could no longer be read back. A billion a request is absurd.
_COST_LIMIT = Decimal("999999999.99999999")
_COST_PLACES = Decimal("1e-8")
# Request ids are the gateway's own UUIDs; anything else keeps a stable id derived from it, so that
# writing it twice still writes it once.
_ID_NAMESPACE = uuid.UUID("6f1c1f0e-8a6e-4b8e-9f3a-0d3c2a7b5e10")


def address(value: Any) -> str | None:
    """A valid IPv4 or IPv6 address, or None; an IPv6 zone (``%eth0``) is not an address part."""
    if not value or not isinstance(value, str):
        return None
    return _address(value)


@lru_cache(maxsize=4096)  # the same clients come back; parsing costs more than the rest of a row
def _address(value: str) -> str | None:
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.scope_id:
        parsed = ipaddress.IPv6Address(value.split("%", 1)[0])
    return str(parsed)


def integer(value: Any, high: int, low: int = 0) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return low
    return min(max(number, low), high)


def finite(value: Any, default: float | None = 0.0) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return number if math.isfinite(number) else default


def cost(value: Any) -> Decimal:
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        return Decimal(0)
    if not amount.is_finite():
        return Decimal(0)
    amount = min(max(amount, -_COST_LIMIT), _COST_LIMIT)
    return amount.quantize(_COST_PLACES)


def timestamp(value: Any) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else []


def entry_values(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload (``services.entry_payload``, or one spooled or dead-lettered by an older version)
    with every value in its column's terms, ``created_at`` a datetime and ``cost_usd`` a Decimal.
    Raises only for what no client controls: a payload without an organization or a time."""
    values = {name: text(payload.get(name), limit) for name, limit in _TEXT_LIMITS.items()}
    request_id = payload["id"]
    values.update(
        id=uuid_text(request_id) or str(uuid.uuid5(_ID_NAMESPACE, text(request_id))),
        organization_id=str(payload["organization_id"]),
        created_at=timestamp(payload["created_at"]),
        team_id=uuid_text(payload.get("team_id")),
        api_key_id=uuid_text(payload.get("api_key_id")),
        provider_key_id=uuid_text(payload.get("provider_key_id")),
        prompt_template_id=uuid_text(payload.get("prompt_template_id")),
        experiment_id=uuid_text(payload.get("experiment_id")),
        prompt_version=None
        if payload.get("prompt_version") is None
        else integer(payload["prompt_version"], _INTEGER),
        stream=bool(payload.get("stream")),
        stream_completed=None
        if payload.get("stream_completed") is None
        else bool(payload["stream_completed"]),
        client_disconnected=bool(payload.get("client_disconnected")),
        status=integer(payload.get("status"), _SMALL),
        attempts=json_value(_list(payload.get("attempts"))),
        policy_decisions=json_value(_list(payload.get("policy_decisions"))),
        input_tokens=integer(payload.get("input_tokens"), _INTEGER),
        output_tokens=integer(payload.get("output_tokens"), _INTEGER),
        cached_input_tokens=integer(payload.get("cached_input_tokens"), _INTEGER),
        reasoning_tokens=integer(payload.get("reasoning_tokens"), _INTEGER),
        cache_write_tokens=integer(payload.get("cache_write_tokens"), _INTEGER),
        usage_estimated=bool(payload.get("usage_estimated")),
        cost_usd=cost(payload.get("cost_usd")),
        cache_savings_usd=cost(payload.get("cache_savings_usd")),
        latency_ms=finite(payload.get("latency_ms")),
        ttft_ms=finite(payload.get("ttft_ms"), default=None),
        upstream_ms=finite(payload.get("upstream_ms")),
        client_ip=address(payload.get("client_ip")),
    )
    if not values["cache"]:
        values["cache"] = "miss"
    if not values["body_mode"]:
        values["body_mode"] = "metadata"
    return values
