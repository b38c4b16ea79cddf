"""Percentiles of a column over a queryset, the way its database can give them: one small class per
way, chosen by the connection's vendor in ``percentiles_for``, so no selector asks which database
runs (the audit log's analytics, an experiment's results).

PostgreSQL computes them in the query (``percentile_cont``, an ordered-set aggregate), alongside
the caller's own aggregates. SQLite has no such aggregate, so the embedded default reads the values
in order and interpolates the same way in Python: fine for the small volumes SQLite is meant for,
not for millions of rows.
"""

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Protocol

from django.db import connections
from django.db.models import Aggregate, FloatField, Q, QuerySet

# name -> (column, fraction, filter or None)
Wanted = Mapping[str, tuple[str, float, Q | None]]


class PercentileCont(Aggregate):
    """PostgreSQL's ``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``."""

    function = "percentile_cont"
    name = "PercentileCont"
    output_field = FloatField()
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, fraction: float, **extra):
        # A number of ours, never user input: safe to place in the SQL text.
        super().__init__(expression, fraction=float(fraction), **extra)


def percentile_cont(ordered: Sequence[float], fraction: float) -> float | None:
    """The same interpolation as ``percentile_cont``, over values sorted ascending."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


class Percentiles(Protocol):
    def aggregates(self, wanted: Wanted) -> dict[str, Aggregate]:
        """To add to the caller's own aggregates (``aggregate`` or ``annotate``): the percentiles
        the database computes in that query; empty when it cannot."""
        ...

    def totals(self, entries: QuerySet, wanted: Wanted) -> dict[str, float | None]:
        """The percentiles of all ``entries`` that ``aggregates`` left out."""
        ...

    def per_group(self, grouped: QuerySet, wanted: Wanted) -> dict[Hashable, dict[str, float | None]]:
        """Per value of ``grouped``'s ``bucket`` annotation, the percentiles ``aggregates`` left out."""
        ...


class InTheQuery:
    """PostgreSQL: ``percentile_cont`` in the caller's query."""

    def aggregates(self, wanted: Wanted) -> dict[str, Aggregate]:
        return {
            name: PercentileCont(column, fraction, filter=condition)
            for name, (column, fraction, condition) in wanted.items()
        }

    def totals(self, entries: QuerySet, wanted: Wanted) -> dict[str, float | None]:
        return {}

    def per_group(self, grouped: QuerySet, wanted: Wanted) -> dict[Hashable, dict[str, float | None]]:
        return {}


class InPython:
    """Databases without ``percentile_cont`` (SQLite): each column read in order, once per column
    and filter, and interpolated here."""

    def aggregates(self, wanted: Wanted) -> dict[str, Aggregate]:
        return {}

    def totals(self, entries: QuerySet, wanted: Wanted) -> dict[str, float | None]:
        values = {}
        for (column, condition), names in _by_column(wanted).items():
            chosen = entries.filter(condition) if condition is not None else entries
            ordered = list(chosen.order_by(column).values_list(column, flat=True))
            values |= {name: percentile_cont(ordered, wanted[name][1]) for name in names}
        return values

    def per_group(self, grouped: QuerySet, wanted: Wanted) -> dict[Hashable, dict[str, float | None]]:
        by_bucket: dict[Hashable, dict[str, float | None]] = {}
        for (column, condition), names in _by_column(wanted).items():
            chosen = grouped.filter(condition) if condition is not None else grouped
            pairs = chosen.order_by("bucket", column).values_list("bucket", column)
            for bucket, rows in itertools.groupby(pairs.iterator(), key=lambda pair: pair[0]):
                ordered = [value for _, value in rows]
                found = by_bucket.setdefault(bucket, {})
                found |= {name: percentile_cont(ordered, wanted[name][1]) for name in names}
        return by_bucket


def _by_column(wanted: Wanted) -> dict[tuple[str, Q | None], list[str]]:
    # Q objects compare by value, so two names filtered alike share one read.
    columns: dict[tuple[str, Q | None], list[str]] = {}
    for name, (column, _, condition) in wanted.items():
        columns.setdefault((column, condition), []).append(name)
    return columns


_VENDORS: dict[str, Percentiles] = {"postgresql": InTheQuery()}
_ELSEWHERE = InPython()


def percentiles_for(queryset: QuerySet) -> Percentiles:
    """The way the queryset's database computes percentiles."""
    return _VENDORS.get(connections[queryset.db].vendor, _ELSEWHERE)
