"""Provider keys' circuit breakers as the audit log shows them, for people (the console's provider
keys page). Read from the log's record of upstream attempts, so it lives with the log; the breakers the
proxy routes by are its own (apps/proxy/routing.py)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.utils import timezone

from .models import AuditEntry


class BreakerState(StrEnum):
    CLOSED = "closed"  # routed to as usual
    OPEN = "open"  # skipped until its cooldown ends
    HALF_OPEN = (
        "half_open"  # cooldown over, not yet proven: one failure opens it again, one success closes it
    )


# Attempt outcomes the proxy counts for a key (apps/proxy/forwarding.py): an answer, or a refusal of
# the request (4xx other than 429), proves the key works and closes the breaker; anything else counts.
_KEY_WORKS = frozenset({"ok", "client_error"})
BREAKER_LOOKBACK = timedelta(hours=1)
BREAKER_MAX_ENTRIES = 2000


@dataclass(frozen=True, slots=True)
class KeyHealth:
    """A provider key's circuit breaker as the audit log shows it (``breaker_states``)."""

    state: BreakerState
    consecutive_failures: int = 0
    last_attempt_at: datetime | None = None
    last_failure_at: datetime | None = None
    last_failure: str = ""  # the outcome, with the upstream's status when it answered
    cooling_until: datetime | None = None  # while open


def breaker_states(organization_id, *, now: datetime | None = None) -> dict[str, KeyHealth]:
    """Each provider key's breaker state by its id (keys without attempts in the last hour are absent,
    that is closed), replayed from the upstream attempts of the organization's recent audit entries.

    The proxy's breaker itself lives in each worker's memory (apps/proxy/routing.py, out of reach of
    the other apps): this is the same rule applied to every worker's attempts together, so it is an
    estimate. It can show a key open that no single worker has opened (failures spread over workers),
    lags the ingest by a second or so, and does not know that a restart forgets the breaker. A 429 is
    taken to cool the key for the whole cooldown: the most the proxy waits."""
    now = now or timezone.now()
    cooldown = timedelta(seconds=settings.GATEWAY_BREAKER_COOLDOWN_SECONDS)
    threshold = settings.GATEWAY_BREAKER_FAILURES
    rows = list(
        AuditEntry.objects.filter(organization_id=organization_id, created_at__gte=now - BREAKER_LOOKBACK)
        .order_by("-created_at", "-id")
        .values_list("created_at", "attempts")[:BREAKER_MAX_ENTRIES]
    )
    failures: dict[str, int] = {}
    seen: dict[str, datetime] = {}
    failed: dict[str, tuple[datetime, str]] = {}
    open_until: dict[str, datetime] = {}
    for created_at, attempts in reversed(rows):  # oldest first, as the proxy saw them
        for attempt in attempts or ():
            key_id = attempt.get("provider_key_id") if isinstance(attempt, dict) else None
            if not key_id:
                continue
            seen[key_id] = created_at
            if attempt.get("outcome") in _KEY_WORKS:
                failures.pop(key_id, None)
                open_until.pop(key_id, None)
                continue
            failures[key_id] = failures.get(key_id, 0) + 1
            status = attempt.get("status")
            failed[key_id] = (created_at, f"{attempt.get('outcome')}" + (f" ({status})" if status else ""))
            if failures[key_id] >= threshold or status == 429:
                open_until[key_id] = max(open_until.get(key_id, created_at), created_at + cooldown)
    states = {}
    for key_id, last_attempt_at in seen.items():
        count = failures.get(key_id, 0)
        until = open_until.get(key_id)
        if until is not None and until > now:
            state = BreakerState.OPEN
        elif count >= threshold:
            state = BreakerState.HALF_OPEN
        else:
            state, until = BreakerState.CLOSED, None
        last_failure_at, last_failure = failed.get(key_id, (None, ""))
        states[key_id] = KeyHealth(
            state=state,
            consecutive_failures=count,
            last_attempt_at=last_attempt_at,
            last_failure_at=last_failure_at,
            last_failure=last_failure,
            cooling_until=until if state == BreakerState.OPEN else None,
        )
    return states
