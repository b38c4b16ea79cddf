"""What a transactional test leaves behind is removed without rebuilding what migrations made.

Django's ``TransactionTestCase`` empties every table after each test and then sends ``post_migrate``,
whose receivers insert every content type and permission again (hundreds of rows, for each of the
suite's hundreds of transactional tests: the proxy's tests run the server's code on threads of its
own, which see only committed rows). Those two tables hold nothing a test makes; they are kept, and
everything else is emptied as Django's ``flush`` empties it, in one statement.
"""

from django.core.management.color import no_style
from django.db import connections
from django.test import TransactionTestCase

KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


def _empty_tables_but_the_migrations_rows(self) -> None:
    for name in self._databases_names(include_mirrors=False):
        connection = connections[name]
        tables = [
            table
            for table in connection.introspection.django_table_names(only_existing=True, include_views=False)
            if table not in KEPT_TABLES
        ]
        connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables, allow_cascade=False))


def install() -> None:
    TransactionTestCase._fixture_teardown = _empty_tables_but_the_migrations_rows
