"""`make run` from the outside: how long it takes to answer, how long it takes to stop, and what its
process tree keeps resident when idle (issue 23's start-up and memory targets).

Measured through the public command only, never the scripts behind it: whatever `make run` starts
(a shell script, a server, a Celery worker, beat as a child or not) is found by walking /proc from
the `make` process, and the server is the process of that tree holding the listening socket on
``PORT``. So the measurement stays right while the way the server starts changes.

The timed starts run against an installed and migrated tree, which is what the issue's figure means:
a first, untimed `make run` installs (when pyproject.toml changed), migrates and creates the first
admin, and is stopped; then the bench organization is seeded into that data directory, and each timed
start runs from spawning `make` to the first 200 of a proxied chat completion with the seeded key
(polled every 20 ms). Beside it, when the server process was spawned (its start time in
/proc/<pid>/stat against `make`'s: what comes before it is `make`'s own steps) and when it first
accepted a connection, so a reader sees where the time goes. The server answering is not
the tree being up: the Celery worker goes on starting (and forks beat) for seconds after it, so
each start then waits, untimed, until the tree is idle (the same processes, and under 5 % of a core
between two readings 2 s apart; when that was is reported too), and only then is stopped: with
SIGTERM to its process group, as a terminal's Ctrl-C or `docker stop` would, timed until no process
of the group is left. A tree stopped while still starting stops faster than one that is up, and its
memory is not yet all there. After the last start has settled, ~200 proxied requests and a few idle
seconds, then each process's RSS (``VmRSS`` of /proc/<pid>/status) and PSS
(/proc/<pid>/smaps_rollup: pages shared with a parent or a forked child shared out, what the tree
really costs).
"""

import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .load import cpu_seconds
from .sequential import BadResponse, Target, completions

POLL_SECONDS = 0.02
FIRST_RUN_TIMEOUT = 600.0  # the first `make run` may pip-install and runs every migration
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0  # GATEWAY_SHUTDOWN_GRACE_SECONDS' default: no request is in flight when we stop
IDLE_REQUESTS = 200
IDLE_SECONDS = 3.0
SETTLE_WINDOW = 2.0  # seconds between two readings of the tree
SETTLE_CORES = 0.05  # the tree is idle under this share of one core over a window
SETTLE_TIMEOUT = 90.0
# Variables of an enclosing `make bench` that would make the inner `make` talk to its jobserver.
MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR")


class NotStarted(Exception):
    """`make run` did not answer, or did not stop."""


@dataclass
class Start:
    server_spawned_seconds: float | None  # `make` to the server process's own start
    listening_seconds: float  # spawn to the first accepted connection
    answer_seconds: float  # spawn to the first 200 of a proxied request
    settled_seconds: float | None  # spawn to the tree idle (None: not within SETTLE_TIMEOUT)
    stop_seconds: float | None  # SIGTERM to the whole process group gone; None: killed after STOP_TIMEOUT
    exit_status: int | None  # `make`'s own; negative: the signal that ended it


@dataclass
class ProcessMemory:
    pid: int
    parent: int
    name: str
    rss_mib: float
    pss_mib: float
    server: bool  # holds the listening socket


@dataclass
class Footprint:
    layout: str  # what `make run` ran on: the embedded default, or the run's DATABASE_URL and REDIS_URL
    starts: list[Start]
    processes: list[ProcessMemory] = field(default_factory=list)
    idle_requests: int = IDLE_REQUESTS
    idle_seconds: float = IDLE_SECONDS

    @property
    def median_answer(self) -> float:
        return statistics.median(s.answer_seconds for s in self.starts)

    @property
    def median_listening(self) -> float:
        return statistics.median(s.listening_seconds for s in self.starts)

    @property
    def slowest_stop(self) -> float | None:
        """None when a start had to be killed."""
        stops = [s.stop_seconds for s in self.starts]
        return None if None in stops else max(s for s in stops if s is not None)

    @property
    def rss_mib(self) -> float:
        return sum(p.rss_mib for p in self.processes)

    @property
    def pss_mib(self) -> float:
        return sum(p.pss_mib for p in self.processes)

    @property
    def server(self) -> ProcessMemory | None:
        """The server process; of several holding the socket (forked workers), the largest."""
        servers = [p for p in self.processes if p.server]
        return max(servers, key=lambda p: p.rss_mib) if servers else None


# --- The process tree, from /proc ------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """A process's state, parent and process group, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    state, parent, group = stat[stat.rindex(")") + 2 :].split()[:3]
    return state, int(parent), int(group)


def _started_ticks(pid: int) -> int:
    """When the process started, in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def server_spawned_after(root: int, port: int) -> float | None:
    """Seconds from the start of ``root`` to the start of the process below it that listens on
    ``port`` (the first, if several do); None if none does."""
    inodes = _listening_inodes(port)
    for pid in descendants(root):
        if _holds_socket(pid, inodes):
            with contextlib.suppress(OSError, ValueError, IndexError):
                return (_started_ticks(pid) - _started_ticks(root)) / os.sysconf("SC_CLK_TCK")
    return None


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it, parents before their children."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(pid)
    tree, stack = [], [root]
    while stack:  # depth first: a child is listed under its parent
        pid = stack.pop()
        tree.append(pid)
        stack.extend(sorted(children.get(pid, []), reverse=True))
    return tree


def group_members(group: int) -> list[int]:
    """Live (not zombie) processes of a process group: orphans reparented to a PID 1 that does not
    reap them stay zombies, and a zombie holds nothing."""
    members = []
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None and stat[2] == group and stat[0] != "Z":
            members.append(pid)
    return members


def _tree_cpu(root: int) -> tuple[frozenset[int], float]:
    """The processes below ``root`` and the CPU seconds they have used."""
    pids, total = descendants(root), 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += cpu_seconds(pid)
    return frozenset(pids), total


def wait_until_idle(root: int, began: float, timeout: float = SETTLE_TIMEOUT) -> float | None:
    """Seconds from ``began`` to the start of the first window of SETTLE_WINDOW seconds in which the
    tree below ``root`` kept the same processes and used under SETTLE_CORES of a core; None when
    that did not happen within ``timeout``."""
    deadline = time.monotonic() + timeout
    previous, previous_at = _tree_cpu(root), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(SETTLE_WINDOW)
        current, now = _tree_cpu(root), time.monotonic()
        if current[0] == previous[0] and current[1] - previous[1] < SETTLE_CORES * (now - previous_at):
            return previous_at - began
        previous, previous_at = current, now
    return None


def _status_kib(pid: int, path: str, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def command_name(argv: list[str]) -> str:
    """A short name for a command line: `make run`, `bash scripts/run.sh`, `python -m
    gateway_project.serve`, `celery worker`. Paths and options are dropped, so the name says what
    runs, not where."""
    if not argv:
        return "?"
    words = list(argv)
    program = os.path.basename(words[0])
    if program.startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            return f"python -m {words[2]}"
        words = words[1:]  # python path/to/script ...: name the script
        program = os.path.basename(words[0])
    if program == "celery":
        for word in words[1:]:
            if word in ("worker", "beat", "flower", "events"):
                return f"celery {word}" + (" -B" if word == "worker" and "-B" in words else "")
        return "celery"
    if program == "daphne":
        return "daphne"
    if program in ("bash", "sh", "dash") and len(words) > 1:
        return f"{program} {words[1]}"
    if program == "make":
        return " ".join(["make", *[w for w in words[1:] if not w.startswith("-") and "=" not in w]])
    return program


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on ``port`` (IPv4 and IPv6), from /proc/net/tcp."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(inode)
    return inodes


def _holds_socket(pid: int, inodes: set[str]) -> bool:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
    return False


def tree_memory(root: int, port: int) -> list[ProcessMemory]:
    """Each process below ``root``, named by its command; a child with its parent's command line
    (a fork: Celery's embedded beat, a prefork child) is named as its parent's child."""
    inodes = _listening_inodes(port)
    processes = []
    names: dict[int, tuple[list[str], str]] = {}
    for pid in descendants(root):
        stat = _stat(pid)
        if stat is None:
            continue
        argv = _cmdline(pid)
        name = command_name(argv)
        parent = names.get(stat[1])
        if parent is not None and parent[0] == argv:
            name = f"{parent[1]}, forked child" + (" (beat)" if name == "celery worker -B" else "")
        names[pid] = (argv, name)
        processes.append(
            ProcessMemory(
                pid=pid,
                parent=stat[1],
                name=name,
                rss_mib=_status_kib(pid, "status", "VmRSS:") / 1024,
                pss_mib=_status_kib(pid, "smaps_rollup", "Pss:") / 1024,
                server=_holds_socket(pid, inodes),
            )
        )
    return processes


# --- Starting and stopping `make run` -----------------------------------------------------------


def make_run_env(env: dict[str, str], port: int) -> dict[str, str]:
    """``env`` (the bench's gateway environment, its own GATEWAY_DATA_DIR) with HOST and PORT, and
    without an enclosing `make bench`'s jobserver variables."""
    inner = {k: v for k, v in env.items() if k not in MAKE_VARIABLES}
    return {**inner, "HOST": "127.0.0.1", "PORT": str(port)}


def stop_tree(process: subprocess.Popen, timeout: float = STOP_TIMEOUT) -> float | None:
    """SIGTERM to the process group ``process`` leads (started with ``start_new_session``), then
    waits until `make` has exited and no process of the group is left; SIGKILL to the group after
    ``timeout``. Returns the seconds it took, or None when it had to kill."""
    began = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = began + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None and not group_members(process.pid):
            return time.monotonic() - began
        time.sleep(POLL_SECONDS)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
    return None


def _answer(target: Target) -> tuple[bool, bool, str]:
    """One proxied request: (connected, a 200 with the required header, what came back)."""
    connection = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
    try:
        connection.request("POST", target.path, body=target.body, headers=target.headers)
        response = connection.getresponse()
        payload = response.read()
    except ConnectionRefusedError:
        return False, False, "connection refused"
    except (OSError, http.client.HTTPException) as error:  # accepted, then cut: still starting
        return True, False, repr(error)
    finally:
        connection.close()
    ok = response.status == 200 and bool(response.getheader(target.required_header or ""))
    return True, ok, f"HTTP {response.status}: {payload[:200]!r}"


def wait_for_answer(
    process: subprocess.Popen, target: Target, began: float, timeout: float
) -> tuple[float, float]:
    """Polls ``target`` until the first 200; returns the seconds since ``began`` to the first accepted
    connection and to that answer."""
    listening = None
    last = "nothing yet"
    deadline = began + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise NotStarted(f"`make run` exited with status {process.returncode} before it answered")
        connected, ok, last = _answer(target)
        now = time.monotonic()
        if connected and listening is None:
            listening = now - began
        if ok:
            return listening if listening is not None else now - began, now - began
        time.sleep(POLL_SECONDS)
    raise NotStarted(f"`make run` did not answer a proxied request within {timeout:.0f} s (last: {last})")


def measure(
    *,
    env: dict[str, str],
    port: int,
    starts: int,
    start: Callable[[str, list[str], dict[str, str]], subprocess.Popen],
    seed: Callable[[dict[str, str]], dict],
    say: Callable[[str], None],
    layout: str,
) -> Footprint:
    """The untimed first run, the seed, ``starts`` timed starts, and the idle tree of the last.

    ``start(name, command, env)`` spawns a process in a new session and has it stopped (by group)
    if the bench ends early; ``seed(env)`` creates the bench organization and returns bench.seed's
    JSON (its key and model)."""
    make = ["make", "run"]
    first = start("make-run-first", make, env)
    headers = {"content-type": "application/json"}
    began = time.monotonic()
    _wait_healthy(first, port, began, FIRST_RUN_TIMEOUT)
    say(f"`make run` (untimed: install, migrate, first admin) up after {time.monotonic() - began:.1f} s")
    stop_tree(first)
    seeded = seed(env)
    target = Target(
        "make run",
        port,
        _chat_body(seeded["model"]),
        {**headers, "authorization": f"Bearer {seeded['api_key']}"},
        required_header=f"x-{env.get('GATEWAY_BRAND', 'gateway').lower()}-request-id",
    )
    footprint = Footprint(layout=layout, starts=[])
    for n in range(1, starts + 1):
        began = time.monotonic()
        process = start(f"make-run-{n}", make, env)
        listening, answered = wait_for_answer(process, target, began, START_TIMEOUT)
        spawned = server_spawned_after(process.pid, port)
        settled = wait_until_idle(process.pid, began)
        if n == starts:
            try:
                completions(target, IDLE_REQUESTS)
            except BadResponse as error:
                raise NotStarted(f"a bad answer from `make run`: {error}") from None
            time.sleep(IDLE_SECONDS)
            footprint.processes = tree_memory(process.pid, port)
        stopped = stop_tree(process)
        footprint.starts.append(Start(spawned, listening, answered, settled, stopped, process.returncode))
        say(
            f"`make run` start {n} of {starts}: the server spawned after "
            + (f"{spawned:.2f} s" if spawned is not None else "?")
            + f", listening after {listening:.2f} s, the first proxied "
            f"answer after {answered:.2f} s, idle after "
            + (f"{settled:.0f} s" if settled is not None else f"more than {SETTLE_TIMEOUT:.0f} s")
            + "; "
            + (
                f"stopped in {stopped:.2f} s (make's status {process.returncode})"
                if stopped is not None
                else f"**still running {STOP_TIMEOUT:.0f} s after SIGTERM: killed**"
            )
        )
    return footprint


def _wait_healthy(process: subprocess.Popen, port: int, began: float, timeout: float) -> None:
    while time.monotonic() < began + timeout:
        if process.poll() is not None:
            raise NotStarted(f"`make run` exited with status {process.returncode} before it was ready")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.1)
    raise NotStarted(f"`make run` did not answer /healthz within {timeout:.0f} s")


def _chat_body(model: str) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    return json.dumps(body).encode()
