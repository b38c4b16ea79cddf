"""The time range of an analytics query or export: ``from``/``to`` or a named ``period``.

``from`` and ``to`` are RFC 3339 timestamps or dates; the range is half-open, ``[from, to)``, so
``from=2026-11-01&to=2026-12-01`` is exactly November. A date is midnight UTC, and a timestamp
without an offset is UTC (every timestamp the gateway writes is). ``period`` is ``24h``, ``7d`` or
``30d`` (ending now) or ``mtd`` (from the first of this month, UTC, until now). Bad input raises
``InvalidParameter``, a 400 ``validation_error`` whose ``fields`` name the parameter at fault;
so do control characters (NUL among them, which PostgreSQL refuses in text and JSON) and overlong
values in any parameter read through ``text_parameter``.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.utils import timezone

from apps.core.errors import InvalidRequest

PERIODS = ("24h", "7d", "30d", "mtd")
_PERIOD_LENGTHS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}

# ASCII digits only: \d would also match digits of other scripts, which no parser here reads.
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}", re.ASCII)
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?", re.ASCII
)
# An unencoded "+" in a query string arrives as a space: "...T10:00:00 01:00".
_SPACE_FOR_PLUS = re.compile(r"(T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}:\d{2})$", re.IGNORECASE | re.ASCII)
# The same as patterns for the OpenAPI document, in ranges of the calendar and the clock. Not said:
# a day the month lacks (2026-02-30) and an instant that leaves the years 1 to 9999 once moved to
# UTC; both are a 400 naming the parameter.
_YEAR_PATTERN = r"(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_DATE_PATTERN = rf"{_YEAR_PATTERN}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_CLOCK_PATTERN = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,9})?)?"
_OFFSET_PATTERN = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]"


def instant_pattern(blanks: str) -> str:
    """A pattern of what ``parse_instant`` reads, between ``blanks`` (a character class's inside:
    what the caller trims and lets through)."""
    instant = (
        f"{_DATE_PATTERN}"
        f"|{_DATE_PATTERN}[Tt ]{_CLOCK_PATTERN}(?:[Zz]|[+-]{_OFFSET_PATTERN})?"
        f"|{_DATE_PATTERN}[Tt]{_CLOCK_PATTERN} {_OFFSET_PATTERN}"  # an unencoded "+"
    )
    return rf"^[{blanks}]*(?:{instant})[{blanks}]*$"


# C0 and C1 controls and DEL: never part of a name, a date or an id.
CONTROL_CHARACTER_RANGE = r"\x00-\x1f\x7f-\x9f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL_CHARACTER_RANGE}]")
# Longer than any timestamp or period this module parses.
INSTANT_MAX_LENGTH = 64


class InvalidParameter(InvalidRequest):
    """A query parameter that cannot be used: a 400 ``validation_error`` naming it in ``fields``,
    as DRF's own validation errors do."""

    code = "validation_error"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"Invalid value for '{field}': {message}", fields={field: [message]})


def text_parameter(params: Mapping[str, str], name: str, *, max_length: int) -> str | None:
    """The value of query parameter ``name`` (``None`` when absent), refused (400) when it is
    longer than ``max_length`` or holds a control character."""
    value = params.get(name)
    if value is None:
        return None
    if len(value) > max_length:
        raise InvalidParameter(name, f"Expected at most {max_length} characters.")
    if CONTROL_CHARACTERS.search(value):
        raise InvalidParameter(name, "Control characters (such as NUL) are not allowed.")
    return value


@dataclass(frozen=True)
class TimeRange:
    """``[start, end)`` in UTC; ``period`` is the named period it came from, if any."""

    start: datetime
    end: datetime
    period: str | None = None


def parse_instant(value: str, field: str) -> datetime:
    """An RFC 3339 timestamp or a date as an aware UTC datetime."""
    text = _SPACE_FOR_PLUS.sub(r"\1+\2", value.strip())
    try:
        if _DATE.fullmatch(text):
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), tzinfo=UTC)
        if _TIMESTAMP.fullmatch(text):
            parsed = datetime.fromisoformat(text.upper().replace(" ", "T"))
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        pass
    raise InvalidParameter(
        field, "Expected an RFC 3339 timestamp (2026-11-01T00:00:00Z) or a date (2026-11-01)."
    )


def period_range(period: str, *, now: datetime | None = None) -> TimeRange:
    now = now or timezone.now()
    if period == "mtd":
        start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return TimeRange(start=start, end=now, period=period)
    if period in _PERIOD_LENGTHS:
        return TimeRange(start=now - _PERIOD_LENGTHS[period], end=now, period=period)
    raise InvalidParameter("period", f"Expected one of {', '.join(PERIODS)}.")


def parse_range(
    params: Mapping[str, str],
    *,
    default_period: str | None = None,
    now: datetime | None = None,
) -> TimeRange:
    """The range a query's ``from``/``to``/``period`` parameters name.

    ``from`` alone runs until now; ``to`` needs ``from``; ``period`` excludes both. With none of
    them, ``default_period`` applies, or, when it is ``None``, a range is required (400)."""
    raw_from, raw_to, raw_period = (
        text_parameter(params, name, max_length=INSTANT_MAX_LENGTH) for name in ("from", "to", "period")
    )
    if raw_period is not None:
        if raw_from is not None or raw_to is not None:
            raise InvalidParameter("period", "Give either 'period' or 'from'/'to', not both.")
        return period_range(raw_period.strip(), now=now)
    if raw_from is None:
        if raw_to is not None:
            raise InvalidParameter("from", "'to' needs 'from'.")
        if default_period is None:
            raise InvalidParameter("from", "A time range is required: 'from' (and 'to') or 'period'.")
        return period_range(default_period, now=now)

    start = parse_instant(raw_from, "from")
    end = parse_instant(raw_to, "to") if raw_to is not None else (now or timezone.now())
    if start >= end:
        field = "to" if raw_to is not None else "from"
        raise InvalidParameter(field, "'from' must be before 'to' (the range is [from, to)).")
    return TimeRange(start=start, end=end)


def format_instant(value: datetime, *, timespec: str = "auto") -> str:
    """RFC 3339 in UTC with a ``Z`` (``timespec`` as ``datetime.isoformat`` takes it)."""
    return value.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
