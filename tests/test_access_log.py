"""The server's access log (gateway_project/access_log.py): a line per request, written soon after
it (not on the request, not only at exit), none for health probes and static files unless asked for,
and the last lines not lost when the server stops."""

import io
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gateway_project.access_log import AccessLog
from tests.servers import ROOT, free_port, subprocess_env, until, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)

TIME = r"\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000"  # UTC
# Daphne's line (client with its port, size), or the proxy's (client, "-" for the size, its fields).
LINE = re.compile(rf'^127\.0\.0\.1(?::\d+)? - - \[{TIME}\] "(\w+ \S+)" (\d{{3}}) (?:\d+|-)(?: \w+=\S+)*$')


def logged_requests(log_path: Path) -> list[tuple[str, str]]:
    """(request, status) of each access line in the server's output."""
    lines = log_path.read_text(errors="replace").splitlines()
    return [match.groups() for line in lines if (match := LINE.match(line))]


def test_requests_are_logged_soon_after_and_none_lost_at_stop_but_not_probes_or_static_files(tmp_path):
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    command = [sys.executable, "-m", "gateway_project.serve", "-b", "127.0.0.1", "-p", str(port)]
    with open(log_path, "w+b") as log:
        server = subprocess.Popen(
            [*command, "gateway_project.asgi:application"],
            cwd=ROOT,
            env=subprocess_env(tmp_path),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_serving(base_url, server, log)
            with httpx.Client(base_url=base_url, timeout=10) as client:
                assert client.get("/healthz").status_code == 200
                assert client.get("/readyz?verbose=1").status_code in (200, 503)
                client.get("/static/admin/css/base.css")
                assert client.get("/v1/models").status_code == 401
                assert client.get("/api/v1/api-keys?page=2").status_code == 401

                # Written while the server runs, within a moment, not on the request nor only at exit.
                expected = [("GET /v1/models", "401"), ("GET /api/v1/api-keys?page=2", "401")]
                assert until(lambda: logged_requests(log_path) == expected, timeout=5), log_path.read_text()

                assert client.post("/v1/chat/completions", json={}).status_code == 401
            server.terminate()  # SIGTERM: the line of the last request is written as the server stops
            assert server.wait(30) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    assert logged_requests(log_path) == [*expected, ("POST /v1/chat/completions", "401")]
    assert "healthz" not in log_path.read_text() and "/static/" not in log_path.read_text()


def test_probes_scrapes_and_static_files_are_logged_only_when_everything_is_asked_for():
    """``GATEWAY_ACCESS_LOG_ALL=true`` (serve.py passes it as ``everything``): Daphne's calls as it
    makes them, without a server (the slow test above shows the default on a live one)."""
    paths = ["/healthz", "/readyz?verbose=1", "/metrics", "/static/admin/css/base.css", "/favicon.ico"]
    paths.append("/api/v1/api-keys")

    def logged(**options) -> list[tuple[str, str]]:
        stream = io.StringIO()
        access_log = AccessLog(stream, **options)
        for path in paths:
            details = {"path": path, "method": "GET", "status": 200, "size": 2, "client": "127.0.0.1:5000"}
            access_log("http", "complete", details)
        access_log.flush()
        return [match.groups() for line in stream.getvalue().splitlines() if (match := LINE.match(line))]

    assert logged() == [("GET /api/v1/api-keys", "200")]
    assert logged(everything=True) == [(f"GET {path}", "200") for path in paths]
