"""What a process knows about its database being out of reach, so that callers fail fast.

Without this, every caller that needs a connection while PostgreSQL is away waits for psycopg's
pool to give up (its ``timeout``, 5 s), and the proxy's database calls, which share one thread,
wait for each other: in the outside run of issue 20 a 67 s outage answered one 500 every 5 s and
nothing else for 35 s. Instead:

- the first connection that fails (a connect refused or timed out, or a pooled connection found
  broken) opens the breaker (``apps/core/postgresql/base.py`` reports it);
- while it is open, asking for a connection raises ``DatabaseUnreachable`` at once, and the proxy
  does not even send the call to its database thread (``known()``);
- every ``DATABASE_RETRY_SECONDS`` one caller probes with a plain connection of its own (a refused
  connect costs about a millisecond; one that hangs at most 2 s, libpq's least connect timeout)
  while the others keep failing fast; the probe closes the breaker when the database answers.

The embedded SQLite default never opens it. One per process, like Django's ``connections``.
"""

import logging
import threading
import time

from django.conf import settings
from django.db import InterfaceError, OperationalError

from apps.core.errors import ServiceUnavailable

logger = logging.getLogger(__name__)

# The errors that mean "no database now" (a PoolTimeout reaches callers as Django's OperationalError).
UNREACHABLE_ERRORS = (OperationalError, InterfaceError)


class DatabaseUnreachable(OperationalError):
    """Raised instead of trying to connect while the breaker is open."""


class DatabaseUnavailable(ServiceUnavailable):
    """What both surfaces answer when a request needs the database and it is out of reach."""

    code = "database_unavailable"

    def __init__(self, message: str = "The gateway cannot reach its database now; retry shortly.") -> None:
        retry_after = max(1, round(settings.DATABASE_RETRY_SECONDS))
        super().__init__(message, headers={"retry-after": str(retry_after), "x-should-retry": "true"})


class DatabaseOutage:
    """A circuit breaker for one process's database connections (module docstring)."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._probe_at = 0.0  # while down: when the next probe may start
        self._probing = False
        self._confirmed = False  # a probe failed, not only a broken connection seen

    def known(self) -> bool:
        """True while an outage is known and no probe is due: the caller should not try."""
        with self._lock:
            return self._down_since is not None and (self._probing or self._clock() < self._probe_at)

    def claim(self) -> bool | None:
        """Before a connection: None when no outage is known (go ahead); True when this caller is
        the one that should probe now; False when it should fail fast."""
        with self._lock:
            if self._down_since is None:
                return None
            if self._probing or self._clock() < self._probe_at:
                return False
            self._probing = True
            return True

    def failed(self, error: BaseException) -> None:
        """A connection could not be made (or the probe failed): fail fast for the retry interval."""
        with self._lock:
            now = self._clock()
            if not self._confirmed:
                logger.error(
                    "Database unreachable (%s); failing fast, probing every %s s",
                    type(error).__name__,
                    settings.DATABASE_RETRY_SECONDS,
                )
            self._down_since = self._down_since or now
            self._confirmed = True
            self._probing = False
            self._probe_at = now + settings.DATABASE_RETRY_SECONDS

    def suspect(self) -> None:
        """A connection in use was found broken: the next caller probes before anyone waits on the
        pool (whose spare connections may be broken too). A database that answers the probe costs
        nobody more than that one connect; one that is gone opens the breaker."""
        with self._lock:
            if self._down_since is None:
                self._down_since = self._clock()
                self._probe_at = 0.0

    def succeeded(self) -> None:
        with self._lock:
            if self._down_since is None:
                return
            lasted, confirmed = self._clock() - self._down_since, self._confirmed
            self._down_since, self._confirmed, self._probing = None, False, False
        if confirmed:
            logger.warning("Database reachable again after %.1f s", lasted)

    def release(self) -> None:
        with self._lock:
            self._probing = False

    def clear(self) -> None:
        with self._lock:
            self._down_since, self._probe_at, self._probing, self._confirmed = None, 0.0, False, False


outage = DatabaseOutage()
