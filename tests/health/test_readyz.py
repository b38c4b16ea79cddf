"""The probes: /healthz says the process is alive, /readyz whether it can serve (database, Redis
when configured, Celery's broker, the outbox's backlog), each part reported, within about 2 s."""

import os
import socket
import time
from pathlib import Path

import httpx
import pytest
from django.test import Client, override_settings

from apps.core.redis import sync_client
from apps.organizations.models import FailMode
from apps.outbox import spool
from tests.factories import OrganizationFactory
from tests.servers import daphne_server, free_port

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-redis-password"


@pytest.fixture
def outbox_dir(tmp_path, settings) -> Path:
    """A spool directory of the test's own: the suite's shared one holds other tests' files."""
    settings.GATEWAY_OUTBOX_DIR = str(tmp_path / "outbox")
    return tmp_path / "outbox"


@pytest.fixture
def probe(outbox_dir) -> Client:
    return Client()


@pytest.fixture
def redis_url():
    """Points REDIS_URL elsewhere for one test; the cached client follows it, and is restored."""
    overrides = []

    def point_at(url: str) -> None:
        override = override_settings(REDIS_URL=url)
        override.enable()
        overrides.append(override)
        sync_client.cache_clear()

    yield point_at
    for override in reversed(overrides):
        override.disable()
    sync_client.cache_clear()


def spooled_file(directory: Path) -> Path:
    """A sealed spool file, written by the spool's own writer and named by it."""
    writer = spool.SpoolWriter(directory)
    writer.append(spool.encode("event", {"v": 1, "id": "x"}))
    writer.seal()
    [path] = spool.waiting_files(directory)
    assert path.name.endswith(spool.SEALED)
    return path


def test_a_healthy_gateway_is_ready_and_says_what_it_checked(probe, settings):
    started = time.monotonic()
    response = probe.get("/readyz")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    expected = {"database", "broker", "outbox"} | ({"redis"} if settings.REDIS_URL else set())
    assert set(body["checks"]) == expected
    assert all(part["ok"] for part in body["checks"].values())
    assert body["checks"]["outbox"]["waiting_files"] == 0
    assert body["checks"]["broker"]["transport"] in ("redis", "filesystem")
    assert time.monotonic() - started < 2
    assert response["Cache-Control"].startswith("max-age=0")


def test_healthz_stays_the_liveness_probe(probe):
    response = probe.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_redis_that_refuses_connections_makes_it_unavailable_and_says_what_that_means(probe, redis_url):
    OrganizationFactory(limits_fail_mode=FailMode.CLOSED)
    OrganizationFactory(limits_fail_mode=FailMode.CLOSED)
    OrganizationFactory(limits_fail_mode=FailMode.OPEN)
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens there
    redis_url(url)

    response = probe.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    redis = body["checks"]["redis"]
    assert redis["ok"] is False
    assert redis["error"]
    assert redis["budgets"] == (
        "organizations set to fail closed answer 503 to requests a budget or rate limit applies to; "
        "the others are served unchecked"
    )
    assert redis["organizations_failing_closed"] == 2
    assert body["checks"]["database"]["ok"] is True
    assert SECRET not in response.content.decode()
    assert url not in response.content.decode()


def test_a_redis_that_hangs_is_reported_within_two_seconds(probe, redis_url):
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        redis_url(f"redis://127.0.0.1:{silent.getsockname()[1]}/0")

        started = time.monotonic()
        response = probe.get("/readyz")
        elapsed = time.monotonic() - started

    assert response.status_code == 503
    assert response.json()["checks"]["redis"]["ok"] is False
    assert elapsed < 2


def test_a_spool_file_waiting_too_long_makes_it_unavailable(probe, outbox_dir, settings):
    settings.GATEWAY_READYZ_OUTBOX_MAX_AGE_SECONDS = 120
    path = spooled_file(outbox_dir)
    written = time.time() - 300  # sealed five minutes ago, and the ingest never took it
    os.utime(path, (written, written))

    response = probe.get("/readyz")

    assert response.status_code == 503
    outbox = response.json()["checks"]["outbox"]
    assert outbox["ok"] is False
    assert outbox["waiting_files"] == 1
    assert 299 <= outbox["oldest_age_seconds"] < 400
    assert outbox["max_age_seconds"] == 120
    assert "ingest" in outbox["error"]


def test_a_spool_file_that_just_arrived_is_a_backlog_but_ready(probe, outbox_dir):
    spooled_file(outbox_dir)

    response = probe.get("/readyz")

    assert response.status_code == 200
    outbox = response.json()["checks"]["outbox"]
    assert outbox["ok"] is True
    assert outbox["waiting_files"] == 1
    assert outbox["oldest_age_seconds"] < 60


def test_the_probes_are_exempt_from_the_https_redirect(outbox_dir, settings):
    settings.SECURE_SSL_REDIRECT = True
    probe = Client()  # made after the change: the middleware reads the setting when it is set up

    assert probe.get("/healthz").status_code == 200
    assert probe.get("/readyz").status_code == 200
    assert probe.get("/admin/login/").status_code == 301


def test_readyz_answers_under_daphne_without_credentials_even_behind_https(tmp_path):
    with daphne_server(tmp_path, GATEWAY_HTTPS="true") as base_url:
        response = httpx.get(f"{base_url}/readyz", timeout=5)
        redirected = httpx.get(f"{base_url}/admin/login/", timeout=5)

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ready"
    assert redirected.status_code == 301


def test_a_hung_broker_is_reported_within_two_seconds_and_not_piled_up(tmp_path):
    with socket.socket() as silent:  # Redis and the broker: connections accepted, never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"redis://:{SECRET}@127.0.0.1:{silent.getsockname()[1]}/0"
        with daphne_server(tmp_path, REDIS_URL=url) as base_url:
            timings, answers = [], []
            for _ in range(2):
                started = time.monotonic()
                answers.append(httpx.get(f"{base_url}/readyz", timeout=10))
                timings.append(time.monotonic() - started)

    first, second = answers
    assert first.status_code == second.status_code == 503
    assert max(timings) < 2.5
    assert first.json()["checks"]["broker"] == {"ok": False, "error": "no answer within 1.5 s"}
    # The first probe's broker check is still hanging: the second does not start another.
    assert second.json()["checks"]["broker"]["error"].startswith("still waiting for the previous check")
    assert first.json()["checks"]["redis"]["ok"] is False
    assert SECRET not in first.text + second.text
