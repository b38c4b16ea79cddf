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
second; one that exits more than ``MAX_RESTARTS`` times in a minute stops them all (exit 1):
something is wrong that a restart does not fix. A server process dies with the supervisor, even one
killed with SIGKILL (``PR_SET_PDEATHSIG``), so none is left serving a port nobody supervises.
Several processes share their counters, limits, revocations and live tail
through Redis: without ``REDIS_URL`` a second process is refused at start-up.
"""

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

from gateway_project.json_lines import json_line

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
    """The host and port of Daphne's arguments (``-b``/``--bind``, ``-p``/``--port``, either form),
    and the rest. Several processes serve one TCP address: a unix socket, a descriptor or an
    endpoint string of one's own is refused."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-b", "--bind", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=8000)
    parser.add_argument("-u", "--unix-socket")
    parser.add_argument("--fd", type=int)
    parser.add_argument("-e", "--endpoint", action="append")
    try:
        known, rest = parser.parse_known_args(arguments)
    except SystemExit:  # argparse's own way of saying a value is missing or wrong
        raise ConfigurationError(
            "the server's -b/--bind and -p/--port need a host and a port number"
        ) from None
    if known.unix_socket or known.fd is not None or known.endpoint:
        raise ConfigurationError("WEB_CONCURRENCY > 1 serves a host and port (-b, -p), not -u, --fd or -e")
    return known.bind, known.port, rest


LISTEN_BACKLOG = 2048


def bound_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` but not listening yet: the kernel sends it no connection
    until ``listen`` (a reuseport server process listens only once its application is loaded)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    bound = socket.socket(family, socket.SOCK_STREAM)
    try:
        bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:  # "::" takes IPv4 clients too, as Twisted's own listener does
            bound.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if host == "::" else 1)
        bound.bind((host, port))
    except OSError:
        bound.close()
        raise
    bound.set_inheritable(True)
    return bound


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    listener = bound_socket(host, port, reuse_port=reuse_port)
    listener.listen(LISTEN_BACKLOG)
    return listener


def start_listening(descriptor: int) -> None:
    """``listen`` on a socket that ``bound_socket`` made and whose descriptor was handed on."""
    bound = socket.socket(fileno=descriptor)
    try:
        bound.listen(LISTEN_BACKLOG)
    finally:
        bound.detach()  # the descriptor stays open: Daphne serves it


def endpoint_arguments(fd: int, host: str) -> list[str]:
    """Daphne's arguments serving the listening socket ``fd`` (its ``--fd`` assumes IPv4)."""
    if ":" in host:
        return ["-e", f"fd:fileno={fd}:domain=INET6"]
    return ["--fd", str(fd)]


def _die_with_the_supervisor() -> None:
    """In each server process before it runs: SIGTERM when the supervisor dies (even by SIGKILL), so
    no server is left serving a port nobody supervises."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


class Supervisor:
    def __init__(self, count: int, mode: str, host: str, port: int, arguments: list[str]) -> None:
        self.count, self.mode, self.arguments = count, mode, arguments
        self.host, self.address = host, f"{host}:{port}"
        if mode == "shared":
            self.listener: socket.socket | None = listening_socket(host, port, reuse_port=False)
        else:
            # No one listens there already (a reuseport socket would join another gateway's quietly).
            listening_socket(host, port, reuse_port=False).close()
            self.listener = None
        self.processes: dict[int, subprocess.Popen] = {}  # slot -> process
        self.restarts: dict[int, list[float]] = {}
        self.due: dict[int, float] = {}  # slot -> when to start it again
        self.stopping = False
        self.told_to_stop: set[int] = set()  # pids sent SIGTERM (once each)

    def command(self) -> list[str]:
        serve = [sys.executable, "-m", "gateway_project.serve"]
        if self.listener is not None:
            return [*serve, *endpoint_arguments(self.listener.fileno(), self.host), *self.arguments]
        return [*serve, *self.arguments]  # serve.py opens its own socket (REUSEPORT_ADDRESS)

    def start(self, slot: int) -> None:
        if self.stopping:
            return
        environ = {**os.environ, "GATEWAY_SERVER_PROCESS": str(slot)}
        environ.pop("WEB_CONCURRENCY", None)
        if self.listener is None:
            environ[REUSEPORT_ADDRESS] = self.address
        fds = (self.listener.fileno(),) if self.listener is not None else ()
        # Our own interpreter and module, with the operator's arguments. Its own process group: a
        # terminal's Ctrl-C reaches the supervisor, which tells each process once.
        self.processes[slot] = subprocess.Popen(  # noqa: S603
            self.command(),
            env=environ,
            pass_fds=fds,
            process_group=0,
            preexec_fn=_die_with_the_supervisor,
        )

    def stop(self, *_signal) -> None:
        """The signal handler: only a flag; the loop tells the processes."""
        self.stopping = True

    def _tell_to_stop(self) -> None:
        if self.listener is not None:
            self.listener.close()  # so the port refuses once the processes close their copies
            self.listener = None
        self.due.clear()
        for process in self.processes.values():
            if process.pid not in self.told_to_stop and process.poll() is None:
                self.told_to_stop.add(process.pid)
                process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for slot in range(self.count):
            self.start(slot)
        status = 0
        while self.processes or (self.due and not self.stopping):
            if self.stopping:
                self._tell_to_stop()
            time.sleep(0.1)
            now = time.monotonic()
            for slot, moment in list(self.due.items()):
                if moment <= now:
                    del self.due[slot]
                    self.start(slot)
            for slot, process in list(self.processes.items()):
                code = process.poll()
                if code is None:
                    continue
                del self.processes[slot]
                if self.stopping:
                    status = status or _exit_status(code)
                    continue
                say(
                    f"Server process {slot} (pid {process.pid}) exited with status {code}; starting it again",
                    level="WARNING",
                )
                if self._too_many_restarts(slot):
                    say(f"Server process {slot} keeps exiting; stopping them all", level="ERROR")
                    self.stopping = True
                    status = 1
                    continue
                self.due[slot] = now + RESTART_DELAY
        return status

    def _too_many_restarts(self, slot: int) -> bool:
        now = time.monotonic()
        recent = [moment for moment in self.restarts.get(slot, []) if now - moment < 60] + [now]
        self.restarts[slot] = recent
        return len(recent) > MAX_RESTARTS


def _exit_status(code: int) -> int:
    """A process's status as a shell reports it; ended by the SIGTERM or SIGINT it was sent: 0."""
    if code in (-signal.SIGTERM, -signal.SIGINT):
        return 0
    return 128 - code if code < 0 else code


def main(arguments: list[str]) -> int:
    try:
        count, mode = concurrency(), socket_mode()
        if count == 1:  # one process: the server itself, in this process (no supervisor)
            os.execv(sys.executable, [sys.executable, "-m", "gateway_project.serve", *arguments])  # noqa: S606
        host, port, rest = split_address(arguments)
    except ConfigurationError as error:
        say(str(error), level="ERROR")
        return 2
    try:
        supervisor = Supervisor(count, mode, host, port, rest)
    except OSError as error:
        say(f"Cannot listen on {host}:{port}: {error.strerror}", level="ERROR")
        return 1
    say(f"{count} server processes on {host}:{port} ({mode} socket)")
    return supervisor.run()


def say(message: str, level: str = "INFO") -> None:
    """The supervisor's own lines, on stderr: JSON too with ``GATEWAY_LOG_FORMAT=json`` (it loads no
    Django, so not through its logging)."""
    if os.environ.get("GATEWAY_LOG_FORMAT") == "json":
        message = json_line("gateway_project.server_processes", message, level)
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
