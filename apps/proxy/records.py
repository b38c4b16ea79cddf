"""Moved: the request record belongs to the audit log (apps/audit/records.py)."""

from apps.audit.records import Attempt, RequestRecord, emit, on_record, remove_listener  # noqa: F401
