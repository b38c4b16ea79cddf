from datetime import UTC

from django.utils.dateparse import parse_datetime
from rest_framework import pagination
from rest_framework.exceptions import NotFound


class CursorPagination(pagination.CursorPagination):
    """Cursor pagination: stable under inserts and no offset scans on large tables. Every list is
    ordered by ``created_at`` first (newest first by default)."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-created_at"

    def decode_cursor(self, request):
        cursor = super().decode_cursor(request)
        # The position goes into a filter on created_at; a forged one must be a bad cursor (404,
        # as DRF answers other bad cursors), not a database error.
        if cursor is not None and cursor.position is not None:
            try:
                moment = parse_datetime(cursor.position)
                valid = moment is not None and moment.tzinfo is not None and bool(moment.astimezone(UTC))
            except (ValueError, OverflowError):
                valid = False
            if not valid:
                raise NotFound(self.invalid_cursor_message)
        return cursor
