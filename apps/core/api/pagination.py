from rest_framework import pagination


class CursorPagination(pagination.CursorPagination):
    """Cursor pagination: stable under inserts and no offset scans on large tables."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 500
    ordering = "-created_at"
