"""What the proxy knows about each request when it is done: the audit log's raw material.

The pipeline fills a ``RequestRecord`` as it goes and hands it over at the end with ``emit``,
after the response has been sent; the hand-off never waits on a database or a broker. Listeners
(the audit writer, spend counters) register with ``on_record``.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from apps.catalog.pricing import Usage

logger = logging.getLogger(__name__)


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


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    started_at: datetime
    endpoint: str
    client_ip: str
    user_agent: str
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
    policy_action: str | None = None
    policy_reason: str | None = None
    policy_decisions: list[dict] = field(default_factory=list)
    status: int = 200
    error_type: str | None = None
    error_code: str | None = None
    usage: Usage | None = None
    cost_usd: Decimal = Decimal(0)
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


_listeners: list[Callable[[RequestRecord], None]] = []


def on_record(listener: Callable[[RequestRecord], None]) -> Callable[[RequestRecord], None]:
    _listeners.append(listener)
    return listener


def remove_listener(listener: Callable[[RequestRecord], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


def emit(record: RequestRecord) -> None:
    """Hands the record to every listener. Listeners must be quick and must not block: they
    enqueue; a failing one is logged and never reaches the client."""
    for listener in _listeners:
        try:
            listener(record)
        except Exception:
            logger.exception("A request-record listener failed (request %s)", record.request_id)
