import re
from datetime import UTC, timedelta

from django.utils.dateparse import parse_datetime
from rest_framework import pagination
from rest_framework.exceptions import NotFound, ValidationError

_DIGITS = re.compile(r"[0-9]+")
# The widest UTC offset PostgreSQL's timestamptz accepts (+-15:59:59).
_MAX_OFFSET = timedelta(hours=16)


class CursorPagination(pagination.CursorPagination):
    """Cursor pagination: stable under inserts and no offset scans on large tables. Every list is
    ordered by ``created_at`` first (newest first by default)."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-created_at"

    def get_page_size(self, request) -> int:
        # DRF quietly ignores a limit it cannot read; a client that sent one should hear about it.
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        significant = raw.lstrip("0")
        if not _DIGITS.fullmatch(raw) or not significant:
            raise ValidationError({self.page_size_query_param: ["A whole number of 1 or more."]})
        # Compared as text first: int() refuses strings of thousands of digits.
        return self.max_page_size if len(significant) > 9 else min(int(significant), self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
                parameter["description"] = (
                    f"Page size, default {self.page_size}; above {self.max_page_size} it is cut to "
                    f"{self.max_page_size}."
                )
        return parameters

    def decode_cursor(self, request):
        cursor = super().decode_cursor(request)
        # The position goes into a filter on created_at; a forged one must be a bad cursor (404,
        # as DRF answers other bad cursors), not a database error. A usable one reaches the
        # database in UTC, the form the gateway writes: no offset PostgreSQL could refuse.
        if cursor is not None and cursor.position is not None:
            try:
                moment = parse_datetime(cursor.position)
                offset = moment.utcoffset() if moment is not None else None
                if offset is None or abs(offset) >= _MAX_OFFSET:
                    raise ValueError(cursor.position)
                cursor = cursor._replace(position=str(moment.astimezone(UTC)))
            except (ValueError, OverflowError):
                raise NotFound(self.invalid_cursor_message) from None
        return cursor
