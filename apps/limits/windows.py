"""Budget windows, in UTC: the window a budget's spend is counted in at a given moment."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .models import BudgetPeriod


@dataclass(frozen=True, slots=True)
class Window:
    id: str  # names the window in counter keys: d2026-11-23, w2026-11-23, m2026-11, f<start>-<end>
    start: datetime
    end: datetime


def window_at(
    period: str, now: datetime, *, starts_at: datetime | None = None, ends_at=None
) -> Window | None:
    """The window of ``period`` holding ``now``; None when a fixed window does not hold it (the
    budget is not in force then)."""
    now = now.astimezone(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == BudgetPeriod.DAILY:
        return Window(f"d{midnight:%Y-%m-%d}", midnight, midnight + timedelta(days=1))
    if period == BudgetPeriod.WEEKLY:
        monday = midnight - timedelta(days=midnight.weekday())
        return Window(f"w{monday:%Y-%m-%d}", monday, monday + timedelta(days=7))
    if period == BudgetPeriod.MONTHLY:
        first = midnight.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
        return Window(f"m{first:%Y-%m}", first, following)
    if period == BudgetPeriod.FIXED:
        if starts_at is None or ends_at is None or not starts_at <= now < ends_at:
            return None
        return Window(f"f{int(starts_at.timestamp())}-{int(ends_at.timestamp())}", starts_at, ends_at)
    raise ValueError(f"Unknown budget period {period!r}")
