"""The container image (Dockerfile, deploy/entrypoint.sh), built and run with podman against the
local PostgreSQL and Redis: migrate, serve, a proxied request to a loopback upstream whose audit entry
an ingest container writes from the shared spool volume, /readyz, the health check, and SIGTERM with a
request in flight. ``make image-test`` builds the image first and runs this module on its own.
"""

import json
import os
import shutil
import subprocess
import threading
import uuid

import httpx
import pytest
from django.conf import settings

from apps.audit.models import AuditEntry
from tests import servers, upstreams
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key

pytestmark = pytest.mark.django_db(transaction=True)

IMAGE = os.environ.get("GATEWAY_TEST_IMAGE", "localhost/llm-gateway:dev")
CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}

upstream = upstreams.upstream


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def image() -> dict:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: `make image-test` installs it (Debian's podman)")
    found = podman("image", "inspect", IMAGE, check=False)
    assert found.returncode == 0, f"no image {IMAGE}: `make image` builds it"
    return json.loads(found.stdout)[0]


class Container:
    """One container of the image on the host's network (the tests' PostgreSQL, Redis and upstream
    listen on loopback), removed at the end whatever happened."""

    def __init__(self, role: str, env: dict[str, str], *options: str) -> None:
        self.name = f"gateway-test-{role}-{uuid.uuid4().hex[:8]}"
        arguments = [f"--env={name}={value}" for name, value in env.items()]
        podman("run", "--detach", "--name", self.name, "--network=host", *options, *arguments, IMAGE, role)

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def stop(self, signal: str = "TERM", timeout: float = 60) -> int:
        podman("kill", "--signal", signal, self.name)
        return int(podman("wait", self.name, timeout=timeout).stdout.strip())

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)


@pytest.fixture
def volume():
    """The spool: a named volume the servers and the ingest share, as in deploy/compose.yaml."""
    name = f"gateway-test-spool-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", name)
    yield name
    podman("volume", "rm", "--force", name, check=False)


@pytest.fixture
def secret_file(tmp_path):
    """SECRET_KEY given as a file, the way an orchestrator's secrets are (SECRET_KEY_FILE)."""
    path = tmp_path / "secret_key"
    path.write_text(settings.SECRET_KEY + "\n")
    path.chmod(0o644)
    return path


def gateway_env(**extra: str) -> dict[str, str]:
    env = {
        "DATABASE_URL": servers.test_database_url(),
        "SECRET_KEY_FILE": "/run/secrets/secret_key",
        "GATEWAY_REDIS_PREFIX": settings.REDIS_KEY_PREFIX,
        "GATEWAY_ALLOW_PRIVATE_UPSTREAMS": "true",  # the test's upstream is on loopback
        "GATEWAY_OUTBOX_INGEST_SECONDS": "0.2",
        "DATABASE_POOL": "false",
    }
    if settings.REDIS_URL:
        env["REDIS_URL"] = settings.REDIS_URL
    return {**env, **extra}


def test_the_image_runs_as_its_own_user_without_a_compiler_and_checks_its_health(image):
    config = image["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["gateway"] and config["Cmd"] == ["server"]
    assert image["Healthcheck"]["Test"] == ["CMD", "gateway", "healthcheck"]  # podman: beside Config
    looked = podman("run", "--rm", "--entrypoint", "sh", IMAGE, "-c", "id -u; command -v gcc cc pip || true")
    assert looked.stdout.split() == ["10001"], "a compiler or pip in the image"
    assert image["Size"] < 900 * 1024 * 1024, f"the image grew to {image['Size'] / 2**20:.0f} MiB"


def test_a_role_without_its_database_or_secret_is_refused_with_the_reason(image):
    refused = podman("run", "--rm", IMAGE, "server", check=False)
    assert refused.returncode == 2
    assert "the server role needs DATABASE_URL" in refused.stderr


def test_migrate_serve_ingest_and_drain_on_sigterm(image, organization, upstream, volume, secret_file):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    mounts = (
        f"--volume={secret_file}:/run/secrets/secret_key:ro",
        f"--volume={volume}:/var/lib/gateway/outbox",
    )
    migrated = podman(
        "run", "--rm", "--network=host", *mounts, *[f"--env={k}={v}" for k, v in gateway_env().items()],
        IMAGE, "migrate",
    )  # fmt: skip
    said = [json.loads(line)["message"] for line in migrated.stdout.splitlines() if line.strip()]
    assert not any("Created organization" in message for message in said)  # the test's own is kept

    port = servers.free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = Container("server", gateway_env(PORT=str(port), WEB_CONCURRENCY="2"), *mounts)
    ingest = Container("ingest", gateway_env(), *mounts)
    try:
        assert servers.until(lambda: _ready(base_url), timeout=60), server.logs()
        # The health check asks a server's /healthz; an ingest is healthy while it runs.
        for container in (server, ingest):
            checked = podman("healthcheck", "run", container.name, check=False)
            assert checked.returncode == 0, (checked.stdout, checked.stderr, container.logs())

        answered = httpx.post(
            f"{base_url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {secret}"}
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["choices"][0]["message"]["content"]

        # SIGTERM while a request waits on the upstream: it is answered, then the server exits 0.
        upstream.behave("slow", delay=2)
        in_flight: dict = {}
        sender = threading.Thread(
            target=lambda: in_flight.update(
                response=httpx.post(
                    f"{base_url}/v1/chat/completions",
                    json=CHAT,
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=30,
                )
            )
        )
        sender.start()
        assert upstream.wait_for_requests(2, timeout=10)
        assert server.stop("TERM") == 0, server.logs()
        sender.join(30)
        assert in_flight["response"].status_code == 200, server.logs()

        # Both answers reach the audit log through the spool volume and the ingest container.
        ids = {
            answered.headers["x-gateway-request-id"],
            in_flight["response"].headers["x-gateway-request-id"],
        }
        assert servers.until(lambda: AuditEntry.objects.filter(id__in=ids).count() == 2, timeout=30), (
            ingest.logs()
        )
        assert ingest.stop("TERM") == 0, ingest.logs()

        for container in (server, ingest):
            lines = [line for line in container.logs().splitlines() if line.strip()]
            assert lines, f"{container.name} logged nothing"
            for line in lines:
                json.loads(line)  # GATEWAY_LOG_FORMAT=json, the image's default: every line
    finally:
        server.remove()
        ingest.remove()


def _ready(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
