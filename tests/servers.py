"""Real servers for the tests that must cross a process boundary (Daphne, Celery)."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database pytest-django created, for a subprocess to use."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def subprocess_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
        "DATABASE_URL": test_database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "GATEWAY_REDIS_PREFIX": settings.REDIS_KEY_PREFIX,
        "GATEWAY_DATA_DIR": str(data_dir),
        "GATEWAY_LOGIN_FAILURE_LIMIT": "1000",
        "DATABASE_POOL": "false",
        "GATEWAY_ALLOW_PRIVATE_UPSTREAMS": "true",  # the tests' upstreams are on loopback
    }
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    env.update(extra)
    return env


def daphne_command(port: int) -> list[str]:
    """The gateway under Daphne on a loopback port, as the tests start it."""
    return [
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "gateway_project.asgi:application",
    ]


@contextmanager
def daphne_server(data_dir: Path, command=daphne_command, **extra_env: str):
    """Serves the gateway with Daphne on a free loopback port; yields its base URL. ``command``
    makes the command line for a port."""
    port = free_port()
    log = open(data_dir / f"daphne-{port}.log", "w+b")
    process = subprocess.Popen(
        command(port),
        cwd=ROOT,
        env=subprocess_env(data_dir, **extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(base_url, process, log)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextmanager
def daphne_server_beside(data_dir: Path, companion: list[str], **extra_env: str):
    """``daphne_server`` with ``companion`` (a Celery worker, the audit ingest) running beside it on
    the same settings, as `make run` runs them; yields the base URL, stops both."""
    process = subprocess.Popen(
        companion,
        cwd=ROOT,
        env=subprocess_env(data_dir, **extra_env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with daphne_server(data_dir, **extra_env) as base_url:
            yield base_url
    finally:
        process.terminate()
        process.wait(30)


def wait_until_serving(base_url: str, process: subprocess.Popen, log, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"Daphne exited early:\n{log.read().decode(errors='replace')}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"Daphne did not start serving {base_url} within {timeout} s")


def until(predicate, timeout: float) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
