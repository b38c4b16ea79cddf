from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests import database_flush
from tests.factories import PASSWORD, MembershipFactory, TeamFactory, create_api_key
from tests.secret_scan import _secret_scan, pytest_runtest_teardown  # noqa: F401 (the run's secret scan)

database_flush.install()

# Run only when the command line names them, each in a process of its own: the browser tests
# (tests/e2e/conftest.py says why) and the container image's (`make image-test`: minutes of build).
OWN_RUNS = (Path(__file__).parent / "e2e", Path(__file__).parent / "image")


# The modules that start process trees or run for tens of seconds, started first. xdist orders the
# modules by their number of tests (each on one worker, --dist loadfile): these few-test, long modules
# came last and ran one after another on one worker while the other sat idle, for minutes at the end
# of the run. `make test` passes --no-loadscope-reorder, so this order is the one xdist follows.
RUN_FIRST = (
    "test_two_nodes.py",
    "audit/test_audit_durability.py",
    "management/test_schemathesis_peers.py",
    "observability/test_traces.py",
    "test_deployment.py",
    "test_shutdown.py",
    "observability/test_logs.py",
    "test_server_processes.py",
    "outbox/test_ingest_reconnect.py",
    "audit/test_ingest_process.py",
    "observability/test_prometheus.py",
    "observability/test_metrics.py",
    "experiments/test_feedback_before_ingest.py",
    "audit/test_export_failures.py",
)


def pytest_collection_modifyitems(items):
    """``RUN_FIRST`` in its order, then the other modules by their number of tests, most first (as
    xdist would order them); each module's tests kept together and in order."""
    tests = Path(__file__).parent
    modules = [
        item.path.relative_to(tests).as_posix() if tests in item.path.parents else "" for item in items
    ]
    counts = Counter(modules)
    rank = {
        module: (RUN_FIRST.index(module), 0) if module in RUN_FIRST else (len(RUN_FIRST), -counts[module])
        for module in counts
    }
    order = {id(item): rank[module] for item, module in zip(items, modules, strict=True)}
    items.sort(key=lambda item: order[id(item)])


def pytest_ignore_collect(collection_path, config):
    for own in OWN_RUNS:
        if collection_path == own or own in collection_path.parents:
            named = [Path(arg.split("::")[0]).resolve() for arg in config.args]
            return not any(path == own or own in path.parents for path in named)
    return None


@pytest.fixture(scope="session", autouse=True)
def _close_database_pools(django_db_setup, django_db_blocker):
    """Connections the async code borrowed from psycopg's pool stay open in it; close the pool, and
    any other connection to the test database, before pytest-django drops it."""
    yield
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all():
            if getattr(connection, "pool", None) is not None:
                connection.close_pool()
            if connection.vendor == "postgresql":
                # A connection another thread of this process opened (a sync_to_async worker of an
                # async test) stays open in that thread: end it, or dropping the test database
                # fails ("being accessed by other users") and leaves it behind.
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )


@pytest.fixture(autouse=True)
def _clear_process_state():
    """Caches that live in the process (login failure counters, the proxy's runtime: its keys,
    configurations, rotation and breaker; L1, the database breaker, the proxy's Redis pause) must
    not carry one test's state into the next."""
    from django.core.cache import cache

    from apps.cache.memory import local_cache
    from apps.core.database import outage
    from apps.core.redis import proxy_redis_pause
    from apps.proxy.runtime import runtime

    clear_cache(cache)
    runtime.reset()
    local_cache.clear()
    yield
    runtime.reset()
    local_cache.clear()
    # A test that cut the database or Redis leaves the next one both known to answer.
    outage.clear()
    proxy_redis_pause.succeeded()


def clear_cache(cache) -> None:
    # django-redis's clear() is FLUSHDB: it would wipe everything else on a shared Redis.
    if hasattr(cache, "delete_pattern"):
        cache.delete_pattern("*")
    else:
        cache.clear()


@pytest.fixture(scope="session", autouse=True)
def _remove_this_runs_redis_keys():
    """Everything this run wrote to Redis carries its own prefix (test_settings); remove it."""
    yield
    from apps.core.redis import sync_client

    client = sync_client()
    if client is not None:
        for key in client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}:*", count=1000):
            client.delete(key)


@pytest.fixture(scope="session", autouse=True)
def _remove_this_runs_outbox_spool():
    yield
    import shutil

    from apps.outbox.outbox import outbox

    outbox().close()
    shutil.rmtree(settings.GATEWAY_OUTBOX_DIR, ignore_errors=True)
    shutil.rmtree(settings.GATEWAY_METRICS_DIR, ignore_errors=True)


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def login(client: APIClient, email: str, password: str = PASSWORD) -> dict:
    response = client.post("/api/v1/auth/login", {"email": email, "password": password}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def owner(db):
    """The owner of the organization under test."""
    return MembershipFactory(role="owner")


@pytest.fixture
def organization(owner):
    return owner.organization


@pytest.fixture
def outsider(db):
    """The owner of another organization, whose objects the tests must never see."""
    return MembershipFactory(role="owner")


@pytest.fixture
def session_client(owner) -> APIClient:
    """An API client signed in as the owner of ``organization``."""
    client = APIClient()
    tokens = login(client, owner.user.email)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    return client


@pytest.fixture
def client_for(db):
    """A signed-in API client for a new member of ``organization`` with the given role."""

    def make(organization, role: str) -> APIClient:
        membership = MembershipFactory(organization=organization, role=role)
        client = APIClient()
        tokens = login(client, membership.user.email)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
        return client

    return make


@pytest.fixture
def team(organization):
    return TeamFactory(organization=organization)


@pytest.fixture
def api_key(organization):
    """(ApiKey, secret) of ``organization`` with the default permission."""
    return create_api_key(organization)
