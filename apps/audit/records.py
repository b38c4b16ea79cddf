"""What the proxy knows about each request when it is done: the audit log's raw material.

The proxy fills a ``RequestRecord`` as it goes and hands it over with ``emit`` once the answer has
been handed to the server, before the event loop runs again: Twisted writes the answer's bytes to
the socket on a later turn of the loop, so by the time a client can read its answer, the record is
on this node's spool (``apps/audit/services.py`` listens here and appends it; apps/outbox). A
stream is handed over after its last chunk and the upstream's end: a process killed in between
(milliseconds) loses that one record.

On the spool a record is a plain payload (``record_payload``): a dict of plain values with a
version ``v``, never a pickled class, so that the next release reads what this one spooled.
Adding a field with a default needs nothing more: ``record_from_payload`` fills a field an older
payload lacks with its default, and ignores a field it does not know. Bump ``PAYLOAD_VERSION`` only
when a field changes meaning or type, and teach ``record_from_payload`` the old version.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from apps.catalog.pricing import Usage

logger = logging.getLogger(__name__)

PAYLOAD_VERSION = 1


@dataclass(slots=True)
class Attempt:
    """One call to an upstream: the routing outcome, attempt by attempt."""

    provider: str
    provider_key_id: str
    model: str
    alias: str | None
    status: int | None  # the upstream's HTTP status; None when no answer came
    outcome: str  # ok, upstream_error, client_error, timeout, connection_error, invalid_response
    latency_ms: float
    error: str | None = None
    trial: bool = False  # the one request that tried a half-open key (its circuit breaker's trial)
    backoff_ms: float | None = None  # a retry of the same key: how long it waited after the failure


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    started_at: datetime
    endpoint: str
    client_ip: str
    user_agent: str
    method: str = ""  # the HTTP method (the access log's line)
    organization_id: str | None = None
    api_key_id: str | None = None
    api_key_prefix: str | None = None
    team_id: str | None = None
    requested_model: str | None = None
    provider: str | None = None
    provider_key_id: str | None = None
    model: str | None = None
    stream: bool = False
    attempts: list[Attempt] = field(default_factory=list)
    cache: str = "bypass"
    prompt_template_id: str | None = None
    prompt_template: str | None = None  # its slug
    prompt_version: int | None = None
    prompt_label: str | None = None
    experiment_id: str | None = None
    experiment_variant: str | None = None
    policy_action: str | None = None
    policy_reason: str | None = None
    policy_decisions: list[dict] = field(default_factory=list)
    status: int = 200
    error_type: str | None = None
    error_code: str | None = None
    usage: Usage | None = None
    cost_usd: Decimal = Decimal(0)
    price_source: str | None = None  # organization, shipped, default or unpriced (apps/proxy/stages.py)
    cache_savings_usd: Decimal = Decimal(0)  # a cache hit: what the answer would have cost
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    upstream_ms: float = 0.0
    # Streams: whether the client saw the whole answer, and why not.
    stream_completed: bool | None = None
    client_disconnected: bool = False
    # What the organization keeps of bodies in its audit log: full, redacted or metadata (none).
    log_bodies: str = "metadata"
    request_body: bytes = b""
    response_body: bytes = b""
    # Set on the spooled form only (record_payload): the body was longer than the audit log keeps.
    request_body_truncated: bool = False
    response_body_truncated: bool = False


# --- The spooled form ---------------------------------------------------------------------------

_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(Attempt))
_USAGE_FIELDS = tuple(f.name for f in fields(Usage))
# Fields whose values are not plain as they are; every other field is copied as it is.
_CONVERTED = {
    "started_at",
    "attempts",
    "usage",
    "cost_usd",
    "cache_savings_usd",
    "request_body",
    "response_body",
    "request_body_truncated",
    "response_body_truncated",
}
_PLAIN_FIELDS = tuple(name for name in _RECORD_FIELDS if name not in _CONVERTED)


def record_payload(record: RequestRecord) -> dict[str, Any]:
    """The record as plain values (str, bytes, numbers, bools, None, lists and dicts of them).
    Runs on the request's event loop: a dict built field by field, nothing more (about 7 us).

    The bodies are cut here to what the audit log keeps (``GATEWAY_AUDIT_MAX_BODY_BYTES``), before
    the spool pickles and encrypts them: a 19.9 MiB body cost 100-300 ms of the event loop on the
    spool (pickle, Fernet, base64, the write), every other request waiting, for 64 KiB kept."""
    payload = {name: getattr(record, name) for name in _PLAIN_FIELDS}
    limit = settings.GATEWAY_AUDIT_MAX_BODY_BYTES
    for name in ("request_body", "response_body"):
        body = getattr(record, name)
        payload[name] = body[:limit] if len(body) > limit else body
        payload[f"{name}_truncated"] = len(body) > limit or getattr(record, f"{name}_truncated")
    payload["v"] = PAYLOAD_VERSION
    payload["started_at"] = record.started_at.isoformat()
    payload["cost_usd"] = str(record.cost_usd)
    payload["cache_savings_usd"] = str(record.cache_savings_usd)
    payload["attempts"] = [{name: getattr(a, name) for name in _ATTEMPT_FIELDS} for a in record.attempts]
    usage = record.usage
    payload["usage"] = None if usage is None else {name: getattr(usage, name) for name in _USAGE_FIELDS}
    return payload


def record_from_payload(payload: dict[str, Any]) -> RequestRecord:
    """A record from its spooled payload, of this version or an older one. Raises ``ValueError``
    for a payload of a version this release does not know (a newer release's: it is dead-lettered,
    not lost, and replayed after the upgrade) and ``KeyError``/``TypeError`` for one without the
    fields every version has."""
    version = payload.get("v")
    if version != PAYLOAD_VERSION:
        raise ValueError(
            f"a request record of payload version {version!r}; this release reads {PAYLOAD_VERSION}"
        )
    values = {name: payload[name] for name in _PLAIN_FIELDS if name in payload}
    values["request_body"] = payload.get("request_body", b"")
    values["response_body"] = payload.get("response_body", b"")
    values["request_body_truncated"] = bool(payload.get("request_body_truncated"))
    values["response_body_truncated"] = bool(payload.get("response_body_truncated"))
    values["started_at"] = datetime.fromisoformat(payload["started_at"])
    values["cost_usd"] = Decimal(payload.get("cost_usd") or 0)
    values["cache_savings_usd"] = Decimal(payload.get("cache_savings_usd") or 0)
    values["attempts"] = [
        Attempt(**{name: attempt[name] for name in _ATTEMPT_FIELDS if name in attempt})
        for attempt in payload.get("attempts") or ()
    ]
    usage = payload.get("usage")
    if usage is not None:
        values["usage"] = Usage(**{name: usage[name] for name in _USAGE_FIELDS if name in usage})
    return RequestRecord(**values)


# --- The hand-over ------------------------------------------------------------------------------

_listeners: list[Callable[[RequestRecord], None]] = []


def on_record(listener: Callable[[RequestRecord], None]) -> Callable[[RequestRecord], None]:
    _listeners.append(listener)
    return listener


def remove_listener(listener: Callable[[RequestRecord], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def emit(record: RequestRecord) -> None:
    """Hands the record to every listener. Listeners must be quick and must not block (the audit
    log's appends one line to a file); a failing one is logged and never reaches the client."""
    for listener in _listeners:
        try:
            listener(record)
        except Exception:
            logger.exception("A request-record listener failed (request %s)", record.request_id)
