"""Django's PostgreSQL backend, reporting to the process's database breaker (apps/core/database.py).

Two places see the database go away: asking for a connection (a connect refused or timed out, the
pool's ``PoolTimeout`` unless a connection of its own shows the pool was only full), and using one
(a pooled connection the server or the network dropped).
Everything else is Django's backend unchanged (``settings.DATABASES`` names this one).
"""

from django.db.backends.postgresql import base
from django.db.utils import DatabaseErrorWrapper
from django.utils.functional import cached_property
from psycopg_pool import PoolTimeout

from apps.core.database import DatabaseUnreachable, outage

# libpq's least connect timeout: a probe of a database that does not answer at all costs this.
_PROBE_CONNECT_TIMEOUT = 2


class _BreakerErrors(DatabaseErrorWrapper):
    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is not None and issubclass(exc_type, self.wrapper.Database.OperationalError):
            connection = self.wrapper.connection
            if connection is not None and (connection.broken or connection.closed):
                outage.suspect()
        return super().__exit__(exc_type, exc_value, traceback)


class DatabaseWrapper(base.DatabaseWrapper):
    @cached_property
    def wrap_database_errors(self):
        return _BreakerErrors(self)

    def get_new_connection(self, conn_params):
        probe = outage.claim()
        if probe is False:
            raise DatabaseUnreachable("the database is unreachable (failing fast until a probe answers)")
        try:
            if probe and self.pool is not None:
                # The pool would keep this caller waiting for its whole timeout while the database
                # is away; a connection of the probe's own answers in milliseconds either way.
                self.Database.connect(**{**conn_params, "connect_timeout": _PROBE_CONNECT_TIMEOUT}).close()
            connection = super().get_new_connection(conn_params)
        except Exception as error:
            if isinstance(error, PoolTimeout) and self._answers(conn_params):
                # Every pooled connection is in use: the pool is full, the database is not away.
                if probe:
                    outage.succeeded()
                raise
            outage.failed(error)
            raise
        except BaseException:  # cancelled: says nothing about the database, but frees the probe
            outage.release()
            raise
        outage.succeeded()
        return connection

    def _answers(self, conn_params) -> bool:
        """Whether the database takes a connection of its own now (the pool's timeout does not
        tell a full pool from a database that is away)."""
        try:
            self.Database.connect(**{**conn_params, "connect_timeout": _PROBE_CONNECT_TIMEOUT}).close()
        except Exception:
            return False
        return True
