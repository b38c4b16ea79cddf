"""Compiled policy engines kept for the proxy and the dry run (``selectors.policy_dry_run``: the API's
``POST /api/v1/policies/dry-run`` and the console's dry-run page).

Building an organization's engine compiles its patterns and terms: up to the organization's bound
(``patterns.ORGANIZATION_COMPILE_SECONDS``, 250 ms), seven term policies about 0.23 s. The outside
check of 2026-11-26 sent 20 dry runs of one organization at once: each compiled the whole engine
while holding a database connection from the pool of 10, and another organization's proxy and API
requests waited 5 s for a connection and answered 500. So:

- the dry run releases its database connections before it asks for an engine (it has read all it
  needs: ``release_database_connections``), and nothing here touches the database;
- an organization's engine is compiled once for its set of active policies and models (the key: the
  snapshots themselves, compared exactly) and kept here, the last ``ORGANIZATIONS`` organizations to
  ask, one engine each (a changed policy set replaces it): many dry runs at once cost one compile;
- that compile is single flight per organization: the dry runs that ask for the same key while it
  is being built wait for it (without a database connection), and another organization's dry run
  never waits on it.

The proxy keeps its own cache of the same kind (``proxy_engines``): a configuration read again for a
change elsewhere (a key, a team, a price bumps the same generation) compiles nothing.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from django.db import connections

from .engine import ModelCatalog, PolicyEngine, PolicySnapshot

# One engine each (at most the organization's bound, 8 MiB of compiled programs, usually a few KB).
ORGANIZATIONS = 16
# The proxy's: every organization a worker serves, as its configurations are (a few KB each, usually).
PROXY_ORGANIZATIONS = 4096


class _Entry:
    __slots__ = ("done", "engine", "error", "key")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.engine: PolicyEngine | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class EngineCache:
    """The last ``size`` organizations' engines, each built once per key (single flight)."""

    def __init__(self, size: int = ORGANIZATIONS) -> None:
        self._size = size
        self._lock = threading.Lock()  # held only to look up and insert, never while compiling
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def engine(self, organization_id, key: Hashable, build: Callable[[], PolicyEngine]) -> PolicyEngine:
        organization_id = str(organization_id)
        with self._lock:
            entry = self._entries.get(organization_id)
            mine = entry is None or entry.key != key
            if mine:
                entry = self._entries[organization_id] = _Entry(key)
                while len(self._entries) > self._size:
                    self._entries.popitem(last=False)
            self._entries.move_to_end(organization_id)
        if not mine:
            entry.done.wait()
            if entry.engine is not None:
                return entry.engine
            # The build failed for its caller (who got the error): this one tries on its own.
            return build()
        try:
            entry.engine = build()
            return entry.engine
        except BaseException as error:
            entry.error = error
            with self._lock:
                if self._entries.get(organization_id) is entry:
                    del self._entries[organization_id]
            raise
        finally:
            entry.done.set()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


dry_run_engines = EngineCache()
# The proxy's: an organization's engine is kept while its policies and models stay the same, so a
# configuration read again for another change (a key, a team, a price) compiles nothing.
proxy_engines = EngineCache(size=PROXY_ORGANIZATIONS)


def engine_for_proxy(
    organization_id, snapshots: tuple[PolicySnapshot, ...], catalog: ModelCatalog
) -> PolicyEngine:
    """The organization's engine for these policies and models, compiled once while they last."""
    return proxy_engines.engine(
        organization_id,
        (snapshots, _catalog_key(catalog)),
        lambda: PolicyEngine.build(snapshots, catalog=catalog),
    )


def engine_for_dry_run(
    organization_id, snapshots: tuple[PolicySnapshot, ...], catalog: ModelCatalog, *, timeout: float
) -> PolicyEngine:
    """The organization's engine for these policies and models, compiled at most once at a time."""
    key = (snapshots, _catalog_key(catalog), timeout)
    return dry_run_engines.engine(
        organization_id,
        key,
        lambda: PolicyEngine.build(snapshots, catalog=catalog, timeout=timeout),
    )


def _catalog_key(catalog: ModelCatalog) -> tuple:
    return (
        tuple(sorted(catalog.own.items())),
        tuple(sorted(catalog.reachable.items())),
        catalog.providers,
    )


def release_database_connections() -> None:
    """Gives this thread's database connections back (to psycopg's pool, or closes them): called once
    a request has read what it needs and before it compiles. Not inside a transaction (closing would
    end it): there is none on the dry run's path; a test that wraps everything in one keeps its
    connection."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.in_atomic_block:
            connection.close()
