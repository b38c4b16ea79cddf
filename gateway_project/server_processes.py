"""``WEB_CONCURRENCY=N``: N server processes on one listening port (``python -m
gateway_project.server_processes``, the same arguments as ``gateway_project.serve``).

Daphne serves from one process, and its Python runs on one core. This supervisor starts N of them
on the same address and keeps them running; it imports nothing of the gateway (a few MiB):

- ``GATEWAY_SERVER_SOCKET=reuseport`` (the default): each process opens its own socket with
  ``SO_REUSEPORT`` and the kernel spreads new connections over them by their addresses' hash: even
  for clients that keep a few connections open for long (an SDK's pool, a balancer's). A process
  that exits on its own drops the connections waiting in its socket's queue (a crash: rare).
- ``GATEWAY_SERVER_SOCKET=shared``: the supervisor opens the listening socket once and hands it to
  every process (Daphne's ``--fd``); the kernel gives each new connection to whichever process
  accepts it first, which left one of 4 processes without a connection from wrk's 32 here. A
  process that stops leaves the socket open in the others: no waiting connection is lost.
docs/benchmarks.md ("Several processes") measures both.

SIGTERM or SIGINT goes to every process, each drains its requests (gateway_project/serve.py), and
the supervisor exits 0 once they all have. A process that exits on its own is started again after a
second; more than ``MAX_RESTARTS`` in a minute stops them all (exit 1): something is wrong that a
restart does not fix. Several processes share their counters, limits, revocations and live tail
through Redis: without ``REDIS_URL`` a second process is refused at start-up.
"""

import os
import signal
import socket
import subprocess
import sys
import time

MAX_PROCESSES = 64
MAX_RESTARTS = 5
RESTART_DELAY = 1.0
SOCKET_MODES = ("shared", "reuseport")
REUSEPORT_ADDRESS = "GATEWAY_REUSEPORT_ADDRESS"  # tells a server process to open its own socket


class ConfigurationError(Exception):
    pass


def concurrency(environ=os.environ) -> int:
    raw = environ.get("WEB_CONCURRENCY", "").strip() or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PROCESSES:
        raise ConfigurationError(
            f"WEB_CONCURRENCY must be a whole number from 1 to {MAX_PROCESSES}; got {raw!r}"
        )
    count = int(raw)
    if count > 1 and not (environ.get("REDIS_URL") or environ.get("REDIS_URL_FILE")):
        raise ConfigurationError(
            f"WEB_CONCURRENCY={count} needs REDIS_URL: without Redis each process keeps its own rate "
            "limits, budgets, revoked keys and live tail, so N processes would let N times through. "
            "Set REDIS_URL, or run one process (WEB_CONCURRENCY=1)."
        )
    return count


def socket_mode(environ=os.environ) -> str:
    mode = environ.get("GATEWAY_SERVER_SOCKET", "").strip() or "reuseport"
    if mode not in SOCKET_MODES:
        raise ConfigurationError(
            f"GATEWAY_SERVER_SOCKET must be one of {', '.join(SOCKET_MODES)}; got {mode!r}"
        )
    return mode


def split_address(arguments: list[str]) -> tuple[str, int, list[str]]:
    """The ``-b``/``--bind`` host and ``-p``/``--port`` of Daphne's arguments, and the rest."""
    host, port, rest = "127.0.0.1", 8000, []
    items = iter(arguments)
    for item in items:
        if item in ("-b", "--bind"):
            host = next(items)
        elif item in ("-p", "--port"):
            port = int(next(items))
        else:
            rest.append(item)
    return host, port, rest


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=2048, reuse_port=reuse_port)
    listener.set_inheritable(True)
    return listener


class Supervisor:
    def __init__(self, count: int, mode: str, host: str, port: int, arguments: list[str]) -> None:
        self.count, self.mode, self.arguments = count, mode, arguments
        self.address = f"{host}:{port}"
        self.listener = listening_socket(host, port, reuse_port=False) if mode == "shared" else None
        self.processes: dict[int, subprocess.Popen] = {}  # slot -> process
        self.restarts: list[float] = []
        self.stopping = False

    def command(self) -> list[str]:
        serve = [sys.executable, "-m", "gateway_project.serve"]
        if self.listener is not None:
            return [*serve, "--fd", str(self.listener.fileno()), *self.arguments]
        return [*serve, *self.arguments]  # serve.py opens its own socket (REUSEPORT_ADDRESS)

    def start(self, slot: int) -> None:
        environ = {**os.environ, "GATEWAY_SERVER_PROCESS": str(slot)}
        environ.pop("WEB_CONCURRENCY", None)
        if self.listener is None:
            environ[REUSEPORT_ADDRESS] = self.address
        fds = (self.listener.fileno(),) if self.listener is not None else ()
        # Our own interpreter and module, with the operator's arguments.
        self.processes[slot] = subprocess.Popen(self.command(), env=environ, pass_fds=fds)  # noqa: S603

    def stop(self, *_signal) -> None:
        self.stopping = True
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for slot in range(self.count):
            self.start(slot)
        status = 0
        while self.processes:
            time.sleep(0.2)
            for slot, process in list(self.processes.items()):
                code = process.poll()
                if code is None:
                    continue
                del self.processes[slot]
                if self.stopping:
                    status = status or code
                    continue
                print(
                    f"Server process {slot} (pid {process.pid}) exited with status {code}; starting it again",
                    file=sys.stderr,
                    flush=True,
                )
                if self._too_many_restarts():
                    print("Server processes keep exiting; stopping them all", file=sys.stderr, flush=True)
                    self.stop()
                    status = 1
                    continue
                time.sleep(RESTART_DELAY)
                self.start(slot)
        return status

    def _too_many_restarts(self) -> bool:
        now = time.monotonic()
        self.restarts = [moment for moment in self.restarts if now - moment < 60] + [now]
        return len(self.restarts) > MAX_RESTARTS


def main(arguments: list[str]) -> int:
    try:
        count, mode = concurrency(), socket_mode()
    except ConfigurationError as error:
        print(error, file=sys.stderr)
        return 2
    if count == 1:  # one process: the server itself, in this process (no supervisor)
        os.execv(sys.executable, [sys.executable, "-m", "gateway_project.serve", *arguments])  # noqa: S606
    host, port, rest = split_address(arguments)
    try:
        supervisor = Supervisor(count, mode, host, port, rest)
    except OSError as error:
        print(f"Cannot listen on {host}:{port}: {error.strerror}", file=sys.stderr)
        return 1
    print(f"{count} server processes on {host}:{port} ({mode} socket)", file=sys.stderr, flush=True)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
