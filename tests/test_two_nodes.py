"""Nodes on shared state, proven on this machine (issue 25, section 4): two nodes of one deployment,
each what `make run` runs (scripts/run.sh: prepare, the server, a Celery worker with the audit ingest
and beat as threads) with its own port and data directories, on the same PostgreSQL (the test
database) and the same Redis (cache, counters, revocations, the Celery broker), behind a local HAProxy
(round robin, checked on /healthz, X-Forwarded-For believed from it alone).

The nodes start once for the module (start-up is the slow part) and are killed at its end. Each test
makes its own organization, keys and upstream; the database is emptied after each (transaction=True)
while the nodes run on, so a test ends only once both nodes' ingests wrote what it spooled. The test
that kills a node comes last: it leaves the node restarted.
"""

import asyncio
import os
import re
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.audit.models import AuditEntry
from apps.catalog.models import ModelAlias
from apps.catalog.services import model_alias_update
from apps.core.redis import redis_key, sync_client
from apps.keys import services as key_services
from apps.limits.services import limits_set
from apps.outbox import spool
from apps.policies.services import policy_create
from tests import haproxy
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key, bearer
from tests.servers import until
from tests.test_shutdown import Gateway, session_alive
from tests.upstreams import upstream  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.REDIS_URL, reason="several nodes share their state through Redis; set REDIS_URL"
    ),
    pytest.mark.skipif(not haproxy.available(), reason=f"no HAProxy at {haproxy.HAPROXY}"),
]

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
# The balancer's client: the nodes' peer is HAProxy (127.0.0.1), so only X-Forwarded-For names it.
CLIENT_ADDRESS = "127.0.0.3"
# A proxied request's access line names its request id.
REQUEST_ID = re.compile(r"\brequest_id=(\S+)")
BEAT = re.compile(r"Beat: (\S+):(\d+):\w+ (leads|waits)")


class Node(Gateway):
    """One node of the deployment: scripts/run.sh with a port, a data directory, a spool and a metrics
    directory of its own. Its broker is the deployment's Redis (REDIS_URL), not the one of its own that
    Gateway gives a gateway. ``run`` numbers its starts: each writes a log of its own."""

    def __init__(self, data_dir: Path, port: int | None = None, run: int = 1) -> None:
        super().__init__(
            data_dir,
            GATEWAY_TRUSTED_PROXIES="127.0.0.1/32",
            GATEWAY_METRICS_DIR=str(data_dir / "metrics"),
        )
        del self.env["CELERY_BROKER_URL"]
        self.data_dir, self.run = data_dir, run
        self.outbox = Path(self.env["GATEWAY_OUTBOX_DIR"])
        self.log_path = data_dir / f"run-{run}.log"
        if port is not None:  # started again where the balancer looks for it
            self.port, self.base_url, self.env["PORT"] = port, f"http://127.0.0.1:{port}", str(port)

    def served(self) -> set[str]:
        """The request ids of the proxied requests in this node's access log."""
        return set(REQUEST_ID.findall(self.output()))

    def kill(self) -> None:
        """``kill -9`` of the whole process tree: the script, the server, the worker."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        assert until(lambda: not session_alive(self.process.pid), 10)

    def again(self) -> "Node":
        """The same node, to start again: its data directories and port, a new log."""
        return Node(self.data_dir, port=self.port, run=self.run + 1)


@dataclass
class Deployment:
    nodes: dict[str, Node]
    balancer: haproxy.HAProxy
    every_node: list[Node] = field(default_factory=list)  # those killed or stopped too

    def restart(self, name: str) -> Node:
        node = self.nodes[name] = self.nodes[name].again()
        self.every_node.append(node)  # stopped at the end, even if it fails to start
        return node.__enter__()


@pytest.fixture(scope="module")
def deployment(django_db_setup, tmp_path_factory):
    """Nodes a and b, started at once (each prepares in turn: `manage.py prepare` takes a lock in
    PostgreSQL, so only one creates the first owner), and HAProxy once both are up."""
    nodes = {name: Node(tmp_path_factory.mktemp(f"node-{name}")) for name in ("a", "b")}
    every_node = list(nodes.values())
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            for started in [pool.submit(node.__enter__) for node in nodes.values()]:
                started.result()
        ports = {name: node.port for name, node in nodes.items()}
        with haproxy.HAProxy(tmp_path_factory.mktemp("haproxy"), ports) as balancer:
            assert balancer.wait_for(20, a="UP", b="UP"), (balancer.states(), balancer.output())
            yield Deployment(nodes, balancer, every_node)
    finally:
        for node in every_node:
            if hasattr(node, "process"):
                node.__exit__()


@pytest.fixture(autouse=True)
def _spools_drained(deployment):
    """The database is emptied after each test while the nodes run on: the test ends once both nodes'
    ingests have written everything it left on their spools (none writes into the next one's)."""
    yield
    for node in deployment.nodes.values():
        assert until(partial(drained, node.outbox), 30), spool.waiting_files(node.outbox)


@pytest.fixture
def routed(organization, upstream):  # noqa: F811
    """``organization`` routes the alias ``fast`` to the loopback upstream."""
    add_provider_key(organization, upstream, secret="sk-upstream-two-nodes")
    return add_alias(organization, "fast", ("openai", "gpt-4o-mini"))


def drained(outbox: Path) -> bool:
    return not spool.waiting_files(outbox)


def request_id(response: httpx.Response) -> str:
    return response.headers["x-gateway-request-id"]


async def send_all(base_url: str, secret: str, count: int, body: dict = CHAT) -> list[httpx.Response]:
    """``count`` requests at once, each on a new connection, from the balancer's client address."""
    transport = httpx.AsyncHTTPTransport(local_address=CLIENT_ADDRESS)
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(transport=transport, timeout=30, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(f"{base_url}/v1/chat/completions", json=body, headers=bearer(secret))
                for _ in range(count)
            )
        )


def one_request(base_url: str, secret: str, body: dict = CHAT) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=bearer(secret), timeout=30)


def wait_for_entries(request_ids: set[str], timeout: float = 30) -> set[str]:
    """The request ids that still have no audit entry once ``timeout`` has passed (polled)."""

    def missing() -> set[str]:
        found = {str(pk) for pk in AuditEntry.objects.filter(id__in=request_ids).values_list("id", flat=True)}
        return request_ids - found

    until(lambda: not missing(), timeout)
    return missing()


def test_a_rate_limit_is_exact_across_both_nodes(deployment, organization, routed):
    """30 a minute for a key admits exactly 30 of 60 requests sent at once through the balancer, which
    spread them over both nodes: the nodes count in the one Redis."""
    api_key, secret = create_api_key(organization)
    limits_set(organization=organization, api_key=api_key, rate_limits={"rpm": 30, "tpm": None})

    responses = asyncio.run(send_all(deployment.balancer.base_url, secret, 60))

    assert sorted(response.status_code for response in responses) == [200] * 30 + [429] * 30
    request_ids = {request_id(response) for response in responses}
    a, b = deployment.nodes["a"], deployment.nodes["b"]
    # Each request is in one node's access log (written within a quarter second), and each node has some.
    assert until(lambda: a.served() | b.served() >= request_ids, 10), request_ids - a.served() - b.served()
    assert not a.served() & b.served() & request_ids
    # Both served some: nodes counting apart would have admitted min(30, n) + min(30, 60 - n) > 30.
    assert a.served() & request_ids and b.served() & request_ids


def test_a_revocation_and_a_configuration_change_apply_on_both_nodes_at_once(
    deployment, organization, routed
):
    """Each node holds a key and the organization's configuration in memory (60 s); a revocation, an
    alias pointed elsewhere and a new blocking policy, each made once, apply to the very next request
    on both nodes (sent to each node directly, not through the balancer)."""
    nodes = list(deployment.nodes.values())
    revoked_key, revoked = create_api_key(organization)
    _, secret = create_api_key(organization)
    titan = {**CHAT, "messages": [{"role": "user", "content": "tell me about titan"}]}
    for node in nodes:  # each node has read both keys and the configuration
        assert one_request(node.base_url, revoked).status_code == 200
        answer = one_request(node.base_url, secret, titan)
        assert answer.status_code == 200
        assert answer.headers["x-gateway-model"] == "gpt-4o-mini"

    key_services.api_key_revoke(api_key=revoked_key)
    model_alias_update(
        model_alias=ModelAlias.objects.get(organization=organization, alias="fast"),
        data={"deployments": [{"provider": "openai", "upstream_model": "gpt-4o"}]},
    )
    for node in nodes:
        refused = one_request(node.base_url, revoked)
        assert refused.status_code == 401, (node.base_url, refused.text)
        assert refused.json()["error"]["type"] == "authentication_error"
        answer = one_request(node.base_url, secret)
        assert answer.status_code == 200
        assert answer.headers["x-gateway-model"] == "gpt-4o", node.base_url

    policy_create(organization=organization, data={"name": "no titan", "action": "block", "terms": ["titan"]})
    for node in nodes:
        blocked = one_request(node.base_url, secret, titan)
        assert blocked.status_code == 400, (node.base_url, blocked.text)
        assert blocked.json()["error"]["code"] == "policy_blocked"
        assert one_request(node.base_url, secret).status_code == 200  # the rest still goes through


def test_both_nodes_run_beat_and_one_leads(deployment):
    """Every node of make run starts beat; one holds the deployment's lease (the Redis key names it)
    and sends the periodic tasks, the other waits: nothing is sent twice."""
    nodes = list(deployment.nodes.values())

    def said() -> list[list[tuple[str, str, str]]]:
        return [BEAT.findall(node.output()) for node in nodes]

    assert until(lambda: all(said()), 30), [node.output()[-2000:] for node in nodes]
    holder = sync_client().get(redis_key("beat", "leader"))
    assert holder is not None
    host, pid, _ = holder.decode().rsplit(":", 2)
    leaders = [node for node in nodes if os.getsid(int(pid)) == node.process.pid]
    assert len(leaders) == 1, (holder, [node.process.pid for node in nodes])
    (leader,) = leaders
    (waiting,) = [node for node in nodes if node is not leader]
    assert said()[nodes.index(leader)] == [(host, pid, "leads")]
    [(_, waiting_pid, verb)] = said()[nodes.index(waiting)]
    assert verb == "waits"
    assert os.getsid(int(waiting_pid)) == waiting.process.pid  # its own worker's beat, not a stale line


def test_every_answered_request_is_in_the_audit_log_with_the_client_behind_the_balancer(
    deployment, organization, routed
):
    """Each node's ingest writes what its server spooled: every request answered through the balancer
    has its entry, from whichever node, with the client's address HAProxy forwarded."""
    _, secret = create_api_key(organization)
    responses = asyncio.run(send_all(deployment.balancer.base_url, secret, 40))
    assert {response.status_code for response in responses} == {200}
    request_ids = {request_id(response) for response in responses}
    a, b = deployment.nodes["a"], deployment.nodes["b"]
    assert until(lambda: a.served() & request_ids and b.served() & request_ids, 10)

    assert wait_for_entries(request_ids) == set()
    entries = AuditEntry.objects.filter(id__in=request_ids)
    assert set(entries.values_list("client_ip", flat=True)) == {CLIENT_ADDRESS}
    assert set(entries.values_list("status", flat=True)) == {200}


class Traffic:
    """Requests sent through the balancer from a thread, ``concurrency`` at a time, until stopped;
    ``answered`` holds the request ids of those a node answered, in order."""

    def __init__(self, base_url: str, secret: str, concurrency: int = 6) -> None:
        self.base_url, self.secret, self.concurrency = base_url, secret, concurrency
        self.answered: list[str] = []
        self.statuses: list[int] = []
        self.failed = 0  # no answer from a node: the connection cut, or HAProxy's own 502/503
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()))

    def __enter__(self) -> "Traffic":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(60)

    async def _run(self) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=CLIENT_ADDRESS)
        limits = httpx.Limits(max_keepalive_connections=0)
        async with httpx.AsyncClient(transport=transport, timeout=30, limits=limits) as client:
            await asyncio.gather(*(self._send(client) for _ in range(self.concurrency)))

    async def _send(self, client: httpx.AsyncClient) -> None:
        while not self._stop.is_set():
            try:
                response = await client.post(
                    f"{self.base_url}/v1/chat/completions", json=CHAT, headers=bearer(self.secret)
                )
            except httpx.TransportError:
                self.failed += 1
                continue
            if "x-gateway-request-id" in response.headers:
                self.answered.append(request_id(response))
                self.statuses.append(response.status_code)
            else:
                self.failed += 1

    def more(self, count: int, timeout: float = 20) -> bool:
        """Whether ``count`` more requests are answered within ``timeout`` seconds."""
        target = len(self.answered) + count
        return until(lambda: len(self.answered) >= target, timeout)


def test_a_node_killed_mid_run_loses_no_answered_request(deployment, organization, routed):
    """kill -9 of a node's whole process tree while traffic flows through the balancer: HAProxy moves
    on to the other node; the killed node, started again on its data directory, takes the spool file
    its dead server left open, and every request answered (by either node, before or after the kill)
    has its audit entry."""
    _, secret = create_api_key(organization)
    balancer, survivor, victim = deployment.balancer, deployment.nodes["a"], deployment.nodes["b"]
    with Traffic(balancer.base_url, secret) as traffic:
        assert until(lambda: len(victim.served() & set(traffic.answered)) >= 10, 30), traffic.failed

        victim.kill()
        left_open = [path for path in spool.waiting_files(victim.outbox) if path.name.endswith(spool.OPEN)]
        assert left_open, "the killed server left no spool file open (was it serving?)"
        assert balancer.wait_for(10, b="DOWN"), balancer.states()
        since_down = len(traffic.answered)
        assert traffic.more(30), (traffic.failed, balancer.states())
        answered_by_a = set(traffic.answered[since_down:])
        assert until(lambda: answered_by_a <= survivor.served(), 10), answered_by_a - survivor.served()
        assert all(path.exists() for path in left_open)  # no other node's ingest reads this spool

        restarted = deployment.restart("b")
        assert balancer.wait_for(20, b="UP"), balancer.states()
        assert until(lambda: restarted.served() & set(traffic.answered), 20), restarted.output()[-2000:]
        assert traffic.more(10)

    assert set(traffic.statuses) == {200}
    answered = set(traffic.answered)
    assert len(answered) == len(traffic.answered)
    assert wait_for_entries(answered) == set()
    assert not any(path.exists() for path in left_open)  # taken by the restarted node's ingest
