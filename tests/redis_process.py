"""A real redis-server of a test's own, on a free loopback port: stopped, restarted empty, or frozen
(SIGSTOP) by the test, the faults issue 20's outside run caused by hand."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisProcess:
    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.mkdtemp(prefix="test-redis-")
        self._process: subprocess.Popen | None = None

    def start(self) -> "RedisProcess":
        """Starts it empty: no snapshot, no append-only file, so a restart loses everything."""
        self._process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", self._dir),
                *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:  # until it answers (it listens within milliseconds)
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
        client.close()
        return self

    def stop(self) -> None:
        if self._process is None:
            return
        os.kill(self._process.pid, signal.SIGCONT)  # a frozen server cannot end otherwise
        self._process.kill()
        self._process.wait(10)
        self._process = None

    def restart_empty(self) -> None:
        self.stop()
        self.start()

    def freeze(self) -> None:
        os.kill(self._process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self._process.pid, signal.SIGCONT)

    def calls(self, command: str) -> int:
        """How many times the server ran ``command`` since it started (INFO commandstats)."""
        client = redis.Redis(port=self.port)
        try:
            stats = client.info("commandstats").get(f"cmdstat_{command.lower()}")
        finally:
            client.close()
        return int(stats["calls"]) if stats else 0

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
