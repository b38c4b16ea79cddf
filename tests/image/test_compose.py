"""deploy/compose.yaml, brought up with podman-compose and checked through its published balancer only:
the secrets from deploy/compose-secrets.sh, the migration and first owner, two server replicas that
HAProxy finds through the network's DNS, a rate limit held across both, a revocation refused by both
at once, the client's address taken from the balancer's X-Forwarded-For (and a forged one not), and
every answered request's audit entry written by the ingest from the spool the replicas share.

No registry is reachable here, so the official postgres, redis and haproxy images are replaced by
stand-ins built from Debian's packages (tests/image/standins, built once and kept); the tests' upstream
runs inside the compose network (tests/image/compose.test.yaml). The test process itself connects to
127.0.0.1 only: the balancer's published port and its status page. Nothing here touches the host's
database: the deployment has its own, in a container.
"""

import asyncio
import hashlib
import ipaddress
import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("GATEWAY_TEST_IMAGE", "localhost/llm-gateway:dev")
BASE_IMAGE = os.environ.get("GATEWAY_STANDIN_BASE_IMAGE", "localhost/debian-python:bookworm")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
STANDINS = ROOT / "tests" / "image" / "standins"
COMPOSE_FILES = (ROOT / "deploy" / "compose.yaml", ROOT / "tests" / "image" / "compose.test.yaml")
ADMIN_EMAIL = "admin@example.com"
CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
READY_SECONDS = 120
FORGED_CLIENT = "203.0.113.7"


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def until(predicate: Callable[[], object], timeout: float, pause: float = 0.25):
    """``predicate``'s first true answer within ``timeout`` seconds, else its last (false) one."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer or time.monotonic() >= deadline:
            return answer
        time.sleep(pause)


def standin_image(name: str) -> str:
    """The stand-in for the official ``name`` image, built once per base image and content of its
    directory."""
    directory = STANDINS / name
    base = podman("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE).stdout.strip()
    digest = hashlib.sha256(base.encode())
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes())
    tag = f"localhost/gateway-standin-{name}:{digest.hexdigest()[:12]}"
    if podman("image", "exists", tag, check=False).returncode != 0:
        ca = [f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.exists() else []
        podman(
            "build", "--quiet", "--network=host", *ca, f"--build-arg=BASE_IMAGE={BASE_IMAGE}",
            f"--tag={tag}", str(directory), timeout=900,
        )  # fmt: skip
    return tag


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 172.31.0.0/16 that no podman network and no route of this host uses (172.31.250.0/24,
    compose.yaml's default, is left to a real deployment)."""
    taken: list[ipaddress.IPv4Network] = []
    names = podman("network", "ls", "--quiet").stdout.split()
    for network in json.loads(podman("network", "inspect", *names).stdout) if names else []:
        for subnet in network.get("subnets") or []:
            taken.append(ipaddress.ip_network(subnet["subnet"], strict=False))
    for line in Path("/proc/net/route").read_text().splitlines()[1:]:
        fields = line.split()
        destination, mask = (
            ipaddress.IPv4Address(bytes.fromhex(value)[::-1]) for value in (fields[1], fields[7])
        )
        if int(mask):
            taken.append(ipaddress.IPv4Network(f"{destination}/{mask}", strict=False))
    candidates = [ipaddress.IPv4Network(f"172.31.{n}.0/24") for n in range(250)]
    free = [
        net for net in candidates if not any(net.overlaps(other) for other in taken if other.version == 4)
    ]
    assert free, "no free /24 in 172.31.0.0/16 for the compose network"
    return random.choice(free)


@dataclass
class Deployment:
    project: str
    command: list[str]
    env: dict[str, str]
    base_url: str
    stats_url: str
    balancer_address: str
    admin_password: str
    answered: dict[str, int] = field(default_factory=dict)  # the proxy's answers: request id to status

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=timeout, env=self.env, cwd=ROOT
        )

    def up(self, *args: str) -> None:
        done = self.compose("up", "-d", *args)
        assert done.returncode == 0, f"podman-compose up -d {' '.join(args)}:\n{done.stdout}\n{done.stderr}"

    def container(self, service: str, number: int = 1) -> str:
        return f"{self.project}_{service}_{number}"

    def containers(self, service: str) -> list[str]:
        found = podman(
            "ps", "--all", "--format", "{{.Names}}",
            f"--filter=label=io.podman.compose.project={self.project}",
            f"--filter=label=io.podman.compose.service={service}",
        ).stdout.split()  # fmt: skip
        return sorted(found)

    def logs(self, container: str) -> str:
        result = podman("logs", container, check=False)
        return result.stdout + result.stderr

    def all_logs(self) -> str:
        names = podman(
            "ps",
            "--all",
            "--format",
            "{{.Names}}",
            f"--filter=label=io.podman.compose.project={self.project}",
        )
        return "\n".join(f"--- {name}\n{self.logs(name)[-3000:]}" for name in names.stdout.split())

    def servers_up(self) -> list[str]:
        """The addresses of the replicas HAProxy counts up (its status page's CSV)."""
        try:
            answer = httpx.get(f"{self.stats_url};csv", timeout=2)
        except httpx.HTTPError:
            return []
        rows = [line.split(",") for line in answer.text.splitlines() if line and not line.startswith("#")]
        header = answer.text.splitlines()[0].lstrip("# ").split(",")
        status, address = header.index("status"), header.index("addr")
        return sorted(
            row[address].rsplit(":", 1)[0]
            for row in rows
            if row[0] == "servers" and row[1] != "BACKEND" and row[status] == "UP"
        )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Iterator[Deployment]:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: `make image-test` installs it (Debian's podman)")
    compose_command = Path(sys.executable).with_name("podman-compose")
    if not compose_command.exists():
        compose_command = Path(shutil.which("podman-compose") or "podman-compose")
    assert podman("image", "exists", IMAGE, check=False).returncode == 0, f"no image {IMAGE}: `make image`"
    assert podman("image", "exists", BASE_IMAGE, check=False).returncode == 0, (
        f"no {BASE_IMAGE} to build the stand-ins from: `make image-base`"
    )
    images = {name: standin_image(name) for name in ("postgres", "redis", "haproxy")}

    directory = tmp_path_factory.mktemp("compose")
    secrets = directory / "secrets"
    made = subprocess.run(
        ["bash", str(ROOT / "deploy" / "compose-secrets.sh"), str(secrets)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "GATEWAY_ADMIN_EMAIL": ADMIN_EMAIL},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert ADMIN_EMAIL in made.stdout and str(secrets / "admin_password") in made.stdout, made.stdout
    assert (secrets.stat().st_mode & 0o777) == 0o700
    password = (secrets / "admin_password").read_text().strip()
    assert password not in made.stdout  # where it is, never the password itself
    before = {path.name: path.read_text() for path in secrets.iterdir()}
    again = subprocess.run(
        ["bash", str(ROOT / "deploy" / "compose-secrets.sh"), str(secrets)], capture_output=True
    )
    assert again.returncode == 0 and {path.name: path.read_text() for path in secrets.iterdir()} == before

    subnet = free_subnet()
    hosts = list(subnet.hosts())
    project = f"gwtest{uuid.uuid4().hex[:8]}"
    port, stats_port = free_port(), free_port()
    # The caller's own deployment settings (GATEWAY_*, COMPOSE_*, image names) stay out of this one.
    inherited = ("GATEWAY_", "COMPOSE_", "POSTGRES_", "REDIS_", "HAPROXY_")
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith(inherited)},
        "GATEWAY_IMAGE": IMAGE,
        "POSTGRES_IMAGE": images["postgres"],
        "REDIS_IMAGE": images["redis"],
        "HAPROXY_IMAGE": images["haproxy"],
        "GATEWAY_SECRETS_DIR": str(secrets),
        "GATEWAY_TESTS_DIR": str(ROOT / "tests"),
        "GATEWAY_BIND": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_STATS_PORT": str(stats_port),
        "GATEWAY_SUBNET": str(subnet),
        "GATEWAY_IP_RANGE": str(next(subnet.subnets(new_prefix=25))),
        "GATEWAY_BALANCER_ADDRESS": str(hosts[199]),
        "GATEWAY_ADMIN_EMAIL": ADMIN_EMAIL,
    }
    command = [str(compose_command), "-p", project, "--podman-rm-args=--volumes"]
    for path in COMPOSE_FILES:
        command += ["-f", str(path)]
    deployment = Deployment(
        project=project,
        command=command,
        env=env,
        base_url=f"http://127.0.0.1:{port}",
        stats_url=f"http://127.0.0.1:{stats_port}/stats",
        balancer_address=str(hosts[199]),
        admin_password=password,
    )
    started = time.monotonic()
    try:
        # In stages, as compose.yaml's header says for this podman (4.3): the stores, healthy by their
        # own checks; the migration, to its end; then every other role, without podman's --requires.
        deployment.up("postgres", "redis")
        for service in ("postgres", "redis"):
            name = deployment.container(service)
            assert until(
                lambda name=name: podman("healthcheck", "run", name, check=False).returncode == 0, 60
            ), deployment.logs(name)
        deployment.up("--no-deps", "migrate")
        migrate = deployment.container("migrate")
        waited = podman("wait", migrate, timeout=READY_SECONDS)
        assert waited.stdout.strip() == "0", deployment.logs(migrate)
        deployment.up("--no-deps", "upstream", "ingest", "worker", "beat", "server", "balancer")
        remaining = READY_SECONDS - (time.monotonic() - started)
        assert until(lambda: _ready(deployment.base_url), remaining, pause=0.5), deployment.all_logs()
        yield deployment
    finally:
        down = deployment.compose("down", "--volumes", timeout=300)
        # Whatever a failed `up` or `down` left: the project's containers (and their anonymous
        # volumes), its volumes, pod and network. The stand-in images stay, for the next run.
        label = f"label=io.podman.compose.project={project}"
        left = podman("ps", "--all", "--quiet", f"--filter={label}", check=False).stdout.split()
        if left:
            podman("rm", "--force", "--volumes", "--time=0", *left, check=False)
        volumes = podman("volume", "ls", "--quiet", f"--filter={label}", check=False).stdout.split()
        if volumes:
            podman("volume", "rm", "--force", *volumes, check=False)
        podman("pod", "rm", "--force", "--ignore", f"pod_{project}", check=False)
        podman("network", "rm", "--force", f"{project}_default", check=False)
        assert down.returncode == 0, f"podman-compose down:\n{down.stdout}\n{down.stderr}"


def _ready(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def admin(deployment) -> dict[str, str]:
    """A management session of the first owner, signed in through the balancer."""
    login = httpx.post(
        f"{deployment.base_url}/api/v1/auth/login",
        json={"email": ADMIN_EMAIL, "password": deployment.admin_password},
        timeout=10,
    )
    assert login.status_code == 200, login.text
    return {"Authorization": f"Bearer {login.json()['access']}"}


@pytest.fixture(scope="module")
def routed(deployment, admin) -> None:
    """What a management script would do first: the upstream's provider key and a model alias."""
    key = httpx.post(
        f"{deployment.base_url}/api/v1/provider-keys",
        headers=admin,
        json={
            "provider": "openai",
            "key": f"sk-upstream-{uuid.uuid4().hex}",
            "data_region": "us",
            "base_url": "http://upstream:8080/v1",
        },
        timeout=10,
    )
    assert key.status_code == 201, key.text
    alias = httpx.post(
        f"{deployment.base_url}/api/v1/models",
        headers=admin,
        json={"alias": "fast", "deployments": [{"provider": "openai", "upstream_model": "gpt-4o-mini"}]},
        timeout=10,
    )
    assert alias.status_code == 201, alias.text


def create_key(deployment: Deployment, admin: dict[str, str], **fields) -> tuple[str, str]:
    made = httpx.post(
        f"{deployment.base_url}/api/v1/api-keys",
        headers=admin,
        json={"name": f"compose-{uuid.uuid4().hex[:8]}", **fields},
        timeout=10,
    )
    assert made.status_code == 201, made.text
    return made.json()["id"], made.json()["key"]


async def _burst(base_url: str, secret: str, count: int, headers: dict[str, str]) -> list[httpx.Response]:
    # A new connection for each request: the balancer spreads them over the replicas.
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        return await asyncio.gather(
            *(
                client.post(
                    f"{base_url}/v1/chat/completions",
                    json=CHAT,
                    headers={"Authorization": f"Bearer {secret}", **headers},
                )
                for _ in range(count)
            )
        )


def burst(deployment: Deployment, secret: str, count: int, **headers: str) -> list[httpx.Response]:
    answers = asyncio.run(_burst(deployment.base_url, secret, count, headers))
    deployment.answered.update(
        {answer.headers["x-gateway-request-id"]: answer.status_code for answer in answers}
    )
    return answers


def access_lines(deployment: Deployment) -> dict[str, tuple[str, dict]]:
    """Every proxied request's access line, by request id: the replica that answered it, and the line."""
    lines = {}
    for replica in deployment.containers("server"):
        for text in deployment.logs(replica).splitlines():
            if '"request_id"' not in text:
                continue
            line = json.loads(text)
            if line.get("logger") == "gateway.access":
                lines[line["request_id"]] = (replica, line)
    return lines


def replicas_of(deployment: Deployment, answers: list[httpx.Response]) -> dict[str, tuple[str, dict]]:
    """The replica and access line of each answer (lines are written within a quarter second)."""
    ids = {answer.headers["x-gateway-request-id"] for answer in answers}
    found: dict[str, tuple[str, dict]] = {}

    def all_found() -> bool:
        found.update({rid: line for rid, line in access_lines(deployment).items() if rid in ids})
        return set(found) == ids

    assert until(all_found, 15), f"{len(ids - set(found))} of {len(ids)} answers in no replica's access log"
    return found


def address_of(container: str) -> str:
    """A container's address on the compose network."""
    return podman(
        "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container
    ).stdout.strip()  # fmt: skip


def test_two_replicas_behind_the_balancer_which_found_both_by_dns(deployment):
    servers = deployment.containers("server")
    assert len(servers) == 2, servers
    assert len(deployment.containers("beat")) == 1
    migrate = deployment.logs(deployment.container("migrate"))
    assert f"Created organization 'My organization' with owner {ADMIN_EMAIL}." in migrate
    assert "Generated password" not in migrate  # GATEWAY_ADMIN_PASSWORD_FILE was read

    addresses = sorted(address_of(name) for name in servers)
    # Both slots of the server-template filled from the DNS answer for `server`, both checked ready.
    assert until(lambda: deployment.servers_up() == addresses, 30), (deployment.servers_up(), addresses)

    # The servers and the ingest share one spool volume.
    def spool(name: str) -> str:
        mounts = json.loads(podman("inspect", "--format", "{{json .Mounts}}", name).stdout)
        return next(m["Name"] for m in mounts if m["Destination"] == "/var/lib/gateway/outbox")

    assert {spool(name) for name in [*servers, deployment.container("ingest")]} == {
        f"{deployment.project}_spool"
    }


def test_a_rate_limit_admits_exactly_30_of_60_requests_spread_over_both_replicas(deployment, admin, routed):
    # Each replica loads the organization's routing on its first request: done with another key first.
    _, warm = create_key(deployment, admin)
    warmed = until(
        lambda: len({r for r, _ in replicas_of(deployment, burst(deployment, warm, 6)).values()}) == 2, 30
    )
    assert warmed, "the balancer sent the warm-up requests to one replica only"

    _, limited = create_key(deployment, admin, rate_limits={"rpm": 30, "tpm": None})
    answers = burst(deployment, limited, 60)
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * 30 + [429] * 30, statuses
    served = replicas_of(deployment, answers)
    by_replica: dict[str, list[int]] = {}
    for replica, line in served.values():
        by_replica.setdefault(replica, []).append(line["status"])
    assert len(by_replica) == 2, f"one replica answered every request: {by_replica}"
    # Each replica alone would have admitted up to 30: the limit is counted once, in Redis.
    assert sum(answered.count(200) for answered in by_replica.values()) == 30, by_replica


def assert_both_replicas_answer(deployment, secret: str) -> None:
    """Bursts through the balancer, every answer a 200, until both replicas have answered some."""
    seen: set[str] = set()

    def both_answer() -> bool:
        answers = burst(deployment, secret, 4)
        assert {answer.status_code for answer in answers} == {200}, [a.text for a in answers]
        seen.update(replica for replica, _ in replicas_of(deployment, answers).values())
        return len(seen) == 2

    assert until(both_answer, 30), f"only {seen} answered"


def test_a_revoked_key_is_refused_at_once_by_both_replicas(deployment, admin, routed):
    key_id, secret = create_key(deployment, admin)
    # Both replicas know the key (each holds it in memory from then on) before it is revoked.
    assert_both_replicas_answer(deployment, secret)

    revoked = httpx.delete(f"{deployment.base_url}/api/v1/api-keys/{key_id}", headers=admin, timeout=10)
    assert revoked.status_code == 204, revoked.text
    refused_by: set[str] = set()

    def both_refused() -> bool:
        answers = burst(deployment, secret, 4)
        assert {answer.status_code for answer in answers} == {401}, [(a.status_code, a.text) for a in answers]
        assert {answer.json()["error"]["code"] for answer in answers} == {"invalid_api_key"}
        refused_by.update(replica for replica, _ in replicas_of(deployment, answers).values())
        return len(refused_by) == 2

    assert until(both_refused, 30), f"only {refused_by} were asked"


def test_the_client_address_is_the_balancers_x_forwarded_for_and_a_forged_one_is_not_believed(
    deployment, admin, routed
):
    _, secret = create_key(deployment, admin)
    plain = burst(deployment, secret, 2)
    forged = burst(deployment, secret, 2, **{"X-Forwarded-For": FORGED_CLIENT})
    lines = replicas_of(deployment, [*plain, *forged])
    clients = {line["client_ip"] for _, line in lines.values()}
    # The address the balancer saw (the test's loopback connection as podman forwards it), never the
    # balancer's own, and never what the client wrote itself.
    seen = set()
    for text in deployment.logs(deployment.container("balancer")).splitlines():
        if '"POST /v1/chat/completions' in text:  # HAProxy's HTTP log: "<client>:<port> [date] ..."
            seen.add(text.split(" ", 1)[0].rsplit(":", 1)[0])
    assert len(clients) == 1, clients
    assert clients <= seen, (clients, seen)
    assert clients.isdisjoint({deployment.balancer_address, FORGED_CLIENT}), clients


def test_a_replica_that_stops_leaves_the_balancer_and_is_found_again_when_it_starts(
    deployment, admin, routed
):
    staying, leaving = deployment.containers("server")
    _, secret = create_key(deployment, admin)
    podman("stop", "--time=45", leaving, timeout=60)
    assert podman("inspect", "--format", "{{.State.ExitCode}}", leaving).stdout.strip() == "0"  # drained
    assert until(lambda: deployment.servers_up() == [address_of(staying)], 30), deployment.servers_up()
    answers = burst(deployment, secret, 10)
    assert [answer.status_code for answer in answers] == [200] * 10
    assert {replica for replica, _ in replicas_of(deployment, answers).values()} == {staying}

    podman("start", leaving)
    both = sorted([address_of(staying), address_of(leaving)])
    assert until(lambda: deployment.servers_up() == both, 60), (deployment.servers_up(), both)
    assert_both_replicas_answer(deployment, secret)


def test_every_answered_request_reaches_the_audit_log_through_the_shared_spool(deployment, admin, routed):
    # Admitted (200) and limited (429) answers. Not the 401s of the revoked key: a process refuses
    # it unaudited once it no longer holds the key in memory (the one that revoked it, and any other
    # after its first refusal), as it refuses a key it never knew.
    expected = {rid for rid, status in deployment.answered.items() if status in (200, 429)}
    assert len(expected) >= 60  # the module's earlier tests' answers
    logged: set[str] = set()

    def all_logged() -> bool:
        url: str | None = f"{deployment.base_url}/api/v1/analytics/logs?limit=500"
        logged.clear()
        while url:
            assert urlsplit(url).hostname == "127.0.0.1", url  # the next page, on the balancer too
            page = httpx.get(url, headers=admin, timeout=10)
            assert page.status_code == 200, page.text
            logged.update(entry["log_id"] for entry in page.json()["results"])
            url = page.json()["next"]
        return expected <= logged

    assert until(all_logged, 30, pause=1), (
        f"not in the audit log: {[(rid, deployment.answered[rid]) for rid in expected - logged]}\n"
        + deployment.logs(deployment.container("ingest"))[-3000:]
    )
