"""A local HAProxy in front of gateway nodes, as a deployment's load balancer: round robin over the
nodes, each checked on ``/healthz``, the client's address passed on in ``X-Forwarded-For``.

It runs in the foreground (``haproxy -db``) as a subprocess in a session of its own, on free loopback
ports, from a configuration written to the test's directory; its stats page (CSV) tells which nodes
it counts up.
"""

import csv
import io
import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from tests.servers import free_port, until

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"

CONFIG = """\
global
    maxconn 2000

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A connection a node refuses (it died) is tried again on another node.
    retries 3
    option redispatch

frontend gateway
    bind 127.0.0.1:{port}
    default_backend nodes

backend nodes
    balance roundrobin
    option httpchk GET /healthz
    option forwardfor
{servers}

listen stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
"""
# A node is counted down after two failed checks 200 ms apart, up again after one good one.
SERVER = "    server {name} 127.0.0.1:{port} check inter 200ms fall 2 rise 1"


def available() -> bool:
    return Path(HAPROXY).exists()


class HAProxy:
    """``servers``: node name to its loopback port. ``base_url`` is the balancer's address."""

    def __init__(self, directory: Path, servers: dict[str, int]) -> None:
        self.port = free_port()
        self.stats_port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config_path = directory / "haproxy.cfg"
        self.log_path = directory / "haproxy.log"
        lines = "\n".join(SERVER.format(name=name, port=port) for name, port in servers.items())
        self.config_path.write_text(CONFIG.format(port=self.port, stats_port=self.stats_port, servers=lines))

    def __enter__(self) -> "HAProxy":
        self.log = open(self.log_path, "w+b")
        self.process = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(self.config_path)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started = until(lambda: self.process.poll() is not None or self._stats() is not None, timeout=10)
        if not started or self.process.poll() is not None:
            self.__exit__()
            raise AssertionError(f"HAProxy did not start:\n{self.output()}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # a hard stop: nothing to drain in a test
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")

    def _stats(self) -> list[dict[str, str]] | None:
        try:
            response = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2)
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        return list(csv.DictReader(io.StringIO(response.text.removeprefix("# "))))

    def states(self) -> dict[str, str]:
        """Each node's state as HAProxy sees it: ``UP``, ``DOWN`` (with the check's detail, as
        ``UP 1/2`` while it is going down)."""
        rows = self._stats() or []
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == "nodes" and row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait_for(self, timeout: float, **expected: str) -> bool:
        """Whether the named nodes reached the given states within ``timeout`` seconds."""
        return until(lambda: expected.items() <= self.states().items(), timeout)
