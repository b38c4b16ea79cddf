"""A write whose name (a slug, an alias) must be unique in its organization: refused with 409.

Every service with a unique name writes the same two steps, so they live here: a check first (a clear
409 without a failed insert in the logs), and the unique index second (a concurrent request took the
name between the check and the insert, and the database decided).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from .errors import Conflict

T = TypeVar("T")


def name_taken(what: str, field: str, value: str, code: str) -> Conflict:
    """``A team with the slug 'ml' exists already.``: the 409 every such service answers."""
    return Conflict(f"{what} with the {field} '{value}' exists already.", code=code)


@contextmanager
def unique_or_conflict(conflict: Conflict) -> Iterator[None]:
    """The writes inside, in a savepoint; a unique index refusing them raises ``conflict``."""
    try:
        with transaction.atomic():
            yield
    except IntegrityError as error:
        raise conflict from error


def save_unique(*, taken: QuerySet, conflict: Conflict, write: Callable[[], T]) -> T:
    """``write()`` unless ``taken`` (the rows that already hold the name) finds one; either way a
    taken name is ``conflict``."""
    if taken.exists():
        raise conflict
    with unique_or_conflict(conflict):
        return write()
