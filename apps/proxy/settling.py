"""Settling after the answer (docs/budgets.md): a let-through request's budget reservations are
replaced by its real cost, its token counts by the tokens it used, and the thresholds crossed are
announced. Settles wait a few milliseconds to go together in one round trip (``SettleQueue``, in
the process's runtime), or ride along with the next admission's (admission.py)."""

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field

from django.utils import timezone

from apps.audit.records import RequestRecord
from apps.events.publish import EventType
from apps.limits.counters import (
    BudgetCharge,
    CountersUnavailable,
    RateCharge,
    SettleEntry,
    counters,
)
from apps.limits.selectors import nanos_to_usd

from .http import ProxyRequest
from .limit_refusals import announce
from .runtime import runtime

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Settlement:
    """What a let-through request must settle after its answer."""

    budgets: list[BudgetCharge]
    tokens: list[RateCharge]
    organization_id: str
    request_id: str


# Settles wait this long to go together, in one round trip: off the path of the next request, and
# one call for many under load. A reservation held a few milliseconds longer only makes the budget
# stricter, never looser.
SETTLE_BATCH_SECONDS = 0.005
SETTLE_BATCH_MAX = 200


@dataclass(slots=True)
class _Pending:
    settlements: list[tuple[Settlement, RequestRecord]] = field(default_factory=list)
    flush: asyncio.TimerHandle | None = None


class SettleQueue:
    """This process's settles: those waiting, per event loop, and those under way."""

    def __init__(self) -> None:
        self.pending: dict[asyncio.AbstractEventLoop, _Pending] = {}
        self.settling: set[asyncio.Task[None]] = set()


def settle_soon(request: ProxyRequest) -> None:
    """Queues the request's settlement, to go with the others of the next few milliseconds; a task
    of its own, so a client that leaves cannot cancel it."""
    settlement = request.settlement
    if settlement is None:
        return
    request.settlement = None
    loop = asyncio.get_running_loop()
    pending = runtime.settles.pending.setdefault(loop, _Pending())
    pending.settlements.append((settlement, request.record))
    if pending.flush is None:
        pending.flush = loop.call_later(SETTLE_BATCH_SECONDS, _flush, loop, context=contextvars.Context())


def take_pending() -> list[tuple[Settlement, RequestRecord]]:
    """The settles this event loop has waiting (at most a batch), taken for an admission's round trip."""
    loop = asyncio.get_running_loop()
    pending = runtime.settles.pending.get(loop)
    if pending is None or not pending.settlements:
        return []
    taken = pending.settlements[:SETTLE_BATCH_MAX]
    del pending.settlements[:SETTLE_BATCH_MAX]
    if not pending.settlements and pending.flush is not None:
        # Nothing left to flush: the next settle queued starts its own wait, so under steady
        # traffic the next admission takes it rather than a round trip of its own.
        pending.flush.cancel()
        pending.flush = None
    return taken


def _flush(loop: asyncio.AbstractEventLoop) -> None:
    pending = runtime.settles.pending.pop(loop, None)
    if pending is None:
        return
    if pending.flush is not None:  # flushed early (wait_for_settlements)
        pending.flush.cancel()
    if not pending.settlements:
        return
    batch = pending.settlements
    for start in range(0, len(batch), SETTLE_BATCH_MAX):
        task = loop.create_task(
            settle(batch[start : start + SETTLE_BATCH_MAX]), context=contextvars.Context()
        )
        runtime.settles.settling.add(task)
        task.add_done_callback(runtime.settles.settling.discard)


def settlement_entries(batch: list[tuple[Settlement, RequestRecord]]) -> list[SettleEntry]:
    """Each request's real cost and tokens against what it reserved and counted."""
    entries = []
    for settlement, record in batch:
        actual = int(record.cost_usd * 10**9)
        usage = record.usage
        used = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
        entries.append(
            SettleEntry(
                settlement.request_id,
                [(charge, actual) for charge in settlement.budgets],
                [(charge, used - charge.cost) for charge in settlement.tokens],
            )
        )
    return entries


async def settle(batch: list[tuple[Settlement, RequestRecord]]) -> None:
    try:
        crossings = await counters().settle_many(now=timezone.now(), entries=settlement_entries(batch))
    except CountersUnavailable as error:
        settle_failed(batch, error)
        return
    except Exception:
        logger.exception("Could not settle %d requests", len(batch))
        return
    announce_crossings(batch, crossings)


def settle_failed(batch: list[tuple[Settlement, RequestRecord]], error: CountersUnavailable) -> None:
    # The reservations expire by themselves; reconcile brings the spend back from the audit log.
    logger.warning("Could not settle %d requests: %s", len(batch), type(error.__cause__).__name__)


def announce_crossings(batch: list[tuple[Settlement, RequestRecord]], crossings: list[list]) -> None:
    for (settlement, _), crossed in zip(batch, crossings, strict=True):
        for crossing in crossed:
            announce(
                settlement.organization_id,
                EventType.BUDGET_THRESHOLD_REACHED,
                crossing.charge,
                {"threshold": crossing.threshold, "spent_usd": f"{nanos_to_usd(crossing.spent_nanos):f}"},
            )


async def wait_for_settlements() -> None:
    """For tests and shutdown: the settles queued and under way."""
    loop = asyncio.get_running_loop()
    _flush(loop)
    while mine := [task for task in runtime.settles.settling if task.get_loop() is loop]:
        await asyncio.gather(*mine, return_exceptions=True)
