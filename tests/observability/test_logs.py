"""Logs as an operator collects them: GATEWAY_LOG_FORMAT=json makes every line of every process one
JSON object, with the request id where a request is served, and a proxied request's access line says
what it did (never a key, a secret or a body)."""

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from apps.observability.logs import loggable_path
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import ROOT, free_port, subprocess_env, until, wait_until_serving
from tests.test_shutdown import Gateway

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 5}
UPSTREAM_SECRET = "sk-upstream-logs-7d1c"


@pytest.fixture
def secret(organization, upstream):
    add_provider_key(organization, upstream, secret=UPSTREAM_SECRET)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    return create_api_key(organization)[1]


class Server:
    """gateway_project.serve (the server make run starts) with its output in a file."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"server-{self.port}.log"
        self.env = subprocess_env(tmp_path, LOG_LEVEL="INFO", **env)

    def __enter__(self) -> "Server":
        command = [sys.executable, "-m", "gateway_project.serve", "-b", "127.0.0.1", "-p", str(self.port)]
        self.log = open(self.log_path, "w+b")
        self.process = subprocess.Popen(
            [*command, "gateway_project.asgi:application"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until_serving(self.base_url, self.process, self.log)
        return self

    def stop(self) -> list[str]:
        """SIGTERM (what is waiting is written), then the lines of the server's output."""
        self.process.terminate()
        assert self.process.wait(30) == 0
        return self.log_path.read_text().splitlines()

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def test_in_json_every_line_is_an_object_and_a_proxied_requests_line_says_what_it_did(
    tmp_path, secret, upstream
):
    with Server(tmp_path, GATEWAY_LOG_FORMAT="json") as server:
        auth = {"Authorization": f"Bearer {secret}"}
        served = httpx.post(f"{server.base_url}/v1/chat/completions", json=CHAT, headers=auth)
        assert served.status_code == 200
        upstream.behave("status", status=500)
        failed = httpx.post(f"{server.base_url}/v1/chat/completions", json=CHAT, headers=auth)
        assert failed.status_code == 502
        upstream.reset()
        managed = httpx.get(f"{server.base_url}/api/v1/api-keys", headers={"X-Request-ID": "ops-check-42"})
        assert managed.status_code == 401 and managed.headers["x-request-id"] == "ops-check-42"
        lines = server.stop()

    entries = [json.loads(line) for line in lines]  # every line, or this raises
    for entry in entries:
        assert {"time", "level", "logger", "message"} <= entry.keys(), entry
        assert entry["time"].endswith("Z")
    access = {entry.get("request_id"): entry for entry in entries if entry["logger"] == "gateway.access"}
    line = access[served.headers["x-request-id"]]
    assert line["status"] == 200 and line["method"] == "POST" and line["endpoint"] == "/v1/chat/completions"
    assert line["model"] == "gpt-4o-mini" and line["provider"] == "openai"
    assert line["cache"] == served.headers["x-gateway-cache"]
    usage = served.json()["usage"]
    assert (line["input_tokens"], line["output_tokens"]) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert line["cost_usd"] == served.headers["x-gateway-cost-usd"]
    assert 0 <= line["overhead_ms"] <= line["latency_ms"]
    assert line["organization_id"]
    failure = access[failed.headers["x-request-id"]]
    assert failure["status"] == 502 and failure["error_code"]
    # The warning the failed attempt logged carries its request's id (and organization).
    warnings = [
        e
        for e in entries
        if e["level"] == "WARNING" and e.get("request_id") == failed.headers["x-request-id"]
    ]
    assert warnings and warnings[0]["organization_id"] == line["organization_id"]
    assert any(e.get("path") == "/api/v1/api-keys" and e["status"] == 401 for e in entries)
    text = "\n".join(lines)
    assert secret not in text and UPSTREAM_SECRET not in text and "Say hello" not in text


def test_in_text_a_proxied_requests_access_line_has_its_fields(tmp_path, secret):
    with Server(tmp_path) as server:
        served = httpx.post(
            f"{server.base_url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {secret}"}
        )
        request_id = served.headers["x-request-id"]
        assert until(lambda: request_id in server.log_path.read_text(), timeout=5)
        lines = server.stop()
    (line,) = [line for line in lines if f"request_id={request_id}" in line]
    assert '"POST /v1/chat/completions" 200 - ' in line
    for field in ("model=gpt-4o-mini", "provider=openai", "latency_ms=", "overhead_ms=", "input_tokens="):
        assert field in line
    assert f"cache={served.headers['x-gateway-cache']}" in line
    assert f"cost_usd={served.headers['x-gateway-cost-usd']}" in line


def test_make_run_in_json_writes_only_json_lines(tmp_path, secret):
    with Gateway(tmp_path, GATEWAY_LOG_FORMAT="json") as gateway:
        answer = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json=CHAT,
            headers={"Authorization": f"Bearer {secret}"},
        )
        assert answer.status_code == 200
        assert gateway.stop() == 0
        lines = gateway.output().splitlines()
    entries = [json.loads(line) for line in lines]
    loggers = {entry["logger"] for entry in entries}
    assert {"gateway.access", "gateway.run"} <= loggers
    assert any(name.startswith("celery") for name in loggers)  # the worker's lines too


def test_a_paths_secrets_are_not_logged():
    assert loggable_path("/console/invitations/Zk3q9w0Yp2xV7rT5nB8mL1cD4/") == "/console/invitations/[token]/"
    assert loggable_path("/console/invitations/0b5f6c7e-1d2a-4e3b-9c8d-7a6b5c4d3e2f/accept") == (
        "/console/invitations/[token]/accept"
    )
    assert loggable_path("/accounts/oidc/x/login/callback/?code=abc123&state=s3cr3t&x=1") == (
        "/accounts/oidc/x/login/callback/?code=[redacted]&state=[redacted]&x=1"
    )
    assert loggable_path("/api/v1/analytics/logs?page=2") == "/api/v1/analytics/logs?page=2"
    # A line break a client put in a path cannot forge a line of the log.
    assert loggable_path('/v1/x\r\n1.2.3.4 - - "POST /v1/chat/completions" 200') == (
        '/v1/x\\x0d\\x0a1.2.3.4 - - "POST /v1/chat/completions" 200'
    )
