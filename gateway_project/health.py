"""The readiness probe, ``/readyz``: can this process serve? (``/healthz`` only says it is alive.)

Each part is checked and reported: ``database`` (a trivial query), ``redis`` (PING; only when
``REDIS_URL`` is set), ``broker`` (a connection to Celery's broker: Redis, or the file broker of the
embedded default), and ``outbox`` (the spool files waiting for the ingest, and the oldest one's age).
200 ``{"status": "ready", "checks": {...}}`` when every part is ok, else 503 ``"unavailable"``.

It lives here, beside the URLs, and not in ``apps/core``: it looks at several apps (the outbox's
spool, the organizations' fail modes) and the core imports none of them (tests/test_layers.py).

A probe answers within ``DEADLINE`` seconds even when a server hangs: the parts run on threads of
their own and a part that has not answered by then is reported as timed out. Its thread is left to
finish (the clients' own timeouts end it), and until it has, that part is not started again: a
probe every few seconds against a hung database never piles up threads.

What is reported never holds a secret: no URL, and error texts scrubbed of credentials.

Served two ways: ``health_app`` answers both probes on the lean path (gateway_project/asgi.py), so a
load balancer's probes never load the management URLs, the admin or DRF into a server process that
only proxies (docs/benchmarks.md, "Issue 23"); the Django views below answer them through the URL
configuration (the test client).
"""

import asyncio
import functools
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

from apps.organizations.models import FailMode, Organization
from apps.outbox import spool

DEADLINE = 1.5  # seconds for every part together; probes are usually given 2 s or more
BROKER_CONNECT_SECONDS = 1.0
BUDGETS_UNCHECKED = (
    "organizations set to fail closed answer 503 to requests a budget or rate limit applies to; "
    "the others are served unchecked"
)

Check = Callable[[], dict[str, Any]]


# --- The parts ----------------------------------------------------------------------------------


def check_database() -> dict[str, Any]:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connections.close_all()  # this thread's connection (back to the pool on PostgreSQL)
    return {"ok": True, "vendor": connections["default"].vendor}


def check_redis() -> dict[str, Any]:
    from apps.core.redis import sync_client

    try:
        sync_client().ping()  # the client's own timeouts are 0.5 s
    except Exception as error:
        report = {"ok": False, "error": _short(error), "budgets": BUDGETS_UNCHECKED}
        try:
            report["organizations_failing_closed"] = Organization.objects.filter(
                limits_fail_mode=FailMode.CLOSED
            ).count()
        except DatabaseError:
            report["organizations_failing_closed"] = None  # the database is reported on its own
        finally:
            connections.close_all()
        return report
    return {"ok": True}


def check_broker() -> dict[str, Any]:
    """The broker of the embedded default (a folder) and Redis are checked without loading Celery in
    a server process; any other broker through Celery's connection."""
    url = getattr(settings, "CELERY_BROKER_URL", "")
    scheme = url.split("://", 1)[0]
    if scheme == "filesystem":
        return _file_broker_report({"ok": True, "transport": "filesystem"})
    if scheme in ("redis", "rediss"):
        _broker_client(url).ping()
        return {"ok": True, "transport": "redis"}
    from apps.core.background import app

    with app.connection_for_write() as connection:
        connection.connect_timeout = BROKER_CONNECT_SECONDS
        connection.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_CONNECT_SECONDS)
        transport = connection.transport_cls
    return {"ok": True, "transport": str(transport)}


def _file_broker_report(report: dict[str, Any]) -> dict[str, Any]:
    # A missing or read-only queue folder would show only when a task is sent.
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {})
    folders = {options.get("data_folder_in"), options.get("data_folder_out")} - {None}
    unusable = [folder for folder in folders if not os.access(folder, os.W_OK | os.X_OK)]
    if unusable:
        return {**report, "ok": False, "error": "the file broker's queue folder is missing or read-only"}
    return report


@functools.cache
def _broker_client(url: str):
    """One client per broker URL, kept: a probe every few seconds reuses its connection. A broker
    that accepts and never answers is left to the probe's deadline, then to this read timeout."""
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=BROKER_CONNECT_SECONDS, socket_timeout=5)


def check_outbox() -> dict[str, Any]:
    """The spool files waiting for the ingest (sealed, or left open by a process), and how long the
    oldest has waited: since it was last written, which is when its writer sealed it (or died)."""
    directory = Path(settings.GATEWAY_OUTBOX_DIR)
    limit = settings.GATEWAY_READYZ_OUTBOX_MAX_AGE_SECONDS
    now = time.time()
    ages = []
    for path in spool.waiting_files(directory):
        try:
            ages.append(now - path.stat().st_mtime)
        except FileNotFoundError:
            continue  # taken and removed by the ingest meanwhile
    oldest = round(max(ages), 1) if ages else None
    report: dict[str, Any] = {
        "ok": oldest is None or oldest <= limit,
        "waiting_files": len(ages),
        "oldest_age_seconds": oldest,
        "max_age_seconds": limit,
    }
    if not report["ok"]:
        report["error"] = (
            "the ingest is not keeping up or not running (manage.py outbox_ingest, or the Celery worker)"
        )
    return report


def checks() -> dict[str, Check]:
    parts: dict[str, Check] = {"database": check_database}
    if settings.REDIS_URL:
        parts["redis"] = check_redis
    parts["broker"] = check_broker
    parts["outbox"] = check_outbox
    return parts


# --- Running them within the deadline -------------------------------------------------------------

_running: dict[str, tuple[threading.Thread, float]] = {}
_running_lock = threading.Lock()


def readiness(deadline: float = DEADLINE) -> tuple[bool, dict[str, dict[str, Any]]]:
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    threads: dict[str, threading.Thread] = {}
    for name, check in checks().items():
        with _running_lock:
            previous = _running.get(name)
            if previous is not None and previous[0].is_alive():
                results[name] = {
                    "ok": False,
                    "error": f"still waiting for the previous check, started "
                    f"{time.monotonic() - previous[1]:.1f} s ago",
                }
                continue
            thread = threading.Thread(
                target=_run, args=(name, check, results), name=f"readyz-{name}", daemon=True
            )
            _running[name] = (thread, time.monotonic())
        threads[name] = thread
        thread.start()
    for name, thread in threads.items():
        thread.join(max(0.0, deadline - (time.monotonic() - started)))
        if thread.is_alive():
            results[name] = {"ok": False, "error": f"no answer within {deadline:g} s"}
    # The order of checks(), whatever order the threads finished in.
    report = {name: results[name] for name in checks() if name in results}
    return all(part["ok"] for part in report.values()), report


def _run(name: str, check: Check, results: dict[str, dict[str, Any]]) -> None:
    try:
        result = check()
    except Exception as error:
        result = {"ok": False, "error": _short(error)}
    results.setdefault(name, result)  # a part reported as timed out stays so in that answer


# URLs with credentials (scheme://user:password@host) and whatever the settings hold as a password.
_CREDENTIALS_IN_URL = re.compile(r"([a-z][a-z0-9+.-]*://)[^/\s@]*@", re.IGNORECASE)


def _short(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    for secret in _secrets():
        text = text.replace(secret, "***")
    text = _CREDENTIALS_IN_URL.sub(r"\1***@", text)
    return text[:200]


def _secrets() -> list[str]:
    from urllib.parse import urlsplit

    found = [str(settings.DATABASES["default"].get("PASSWORD") or "")]
    for url in (settings.REDIS_URL, getattr(settings, "CELERY_BROKER_URL", "")):
        if url:
            found += [url, urlsplit(url).password or ""]
    return [secret for secret in found if len(secret) >= 4]


# --- The view, and the lean path ----------------------------------------------------------------


@never_cache
def readyz(request) -> JsonResponse:
    """Unauthenticated, like /healthz: it tells nothing about any organization's data."""
    ready, report = readiness()
    return JsonResponse(
        {"status": "ready" if ready else "unavailable", "checks": report}, status=200 if ready else 503
    )


PROBES = ("/healthz", "/readyz")
_PROBE_HEADERS = [
    (b"content-type", b"application/json"),
    (b"cache-control", b"max-age=0, no-cache, no-store, must-revalidate, private"),
    (b"x-content-type-options", b"nosniff"),
]


async def health_app(scope, receive, send) -> None:
    """``/healthz`` and ``/readyz`` (``PROBES``) as the views above answer them, without Django's
    handler; the checks run on a thread, so a slow part never holds the event loop."""
    if scope["path"] == "/healthz":
        status, body = 200, {"status": "ok"}
    else:
        ready, report = await asyncio.to_thread(readiness)
        status = 200 if ready else 503
        body = {"status": "ready" if ready else "unavailable", "checks": report}
    encoded = json.dumps(body).encode()
    headers = [*_PROBE_HEADERS, (b"content-length", str(len(encoded)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else encoded})
