"""Where a budget's spend so far is read from: the audit log.

The audit app records and prices every request and sits above this one (docs/architecture.md), so
limits does not import it: it asks the reader the audit app registers at start-up
(``AuditConfig.ready``), which every process layout runs (servers, the ingest, workers, tests).
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import ImproperlyConfigured

# (organization_id, scope, scope_id, start, end) -> what the scope spent in [start, end).
SpendReader = Callable[[object, str, str, datetime, datetime | None], Decimal]

_reader: SpendReader | None = None


def register_spend_reader(reader: SpendReader) -> None:
    global _reader
    _reader = reader


def spend_since(
    organization_id, scope: str, scope_id, start: datetime, end: datetime | None = None
) -> Decimal:
    """What the organization, one of its teams or keys (``scope``: organization, team, api_key) spent
    from ``start`` to ``end`` (default now), as the audit log says."""
    if _reader is None:
        raise ImproperlyConfigured("No spend reader: apps.audit registers it and must be installed.")
    return _reader(organization_id, scope, scope_id, start, end)
