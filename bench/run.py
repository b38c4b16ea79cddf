"""`make bench`: what the gateway adds to a request, against a zero-latency upstream.

One run starts a stand-in upstream (bench/upstream.py) and one Daphne process serving the gateway
on a throwaway database, then measures each thing twice, straight to the upstream and through the
gateway (the sequential runs in alternating blocks, so both see the same machine): sequential
latency, streaming time to first byte, and throughput at 32 connections with wrk (with the Daphne
process's CPU per request). OpenAI's Responses API and Anthropic's Messages
API, each native and bridged, are measured the same way against the upstream endpoint the gateway
calls for them, alternating with the chat case. It profiles the gateway under load with py-spy,
then soaks the same Daphne process with 200,000 requests, streams included, to see whether its
memory stays flat (bench/soak.py). Before any of it, it times the real `make run` from start to the
first proxied answer, and its stop, and reads its idle process tree's memory (bench/footprint.py),
in the layout of the run. It prints a table and rewrites the generated block of docs/benchmarks.md.

Settings (environment):
    BENCH_SECONDS           seconds per wrk run (default 10)
    BENCH_REQUESTS          sequential requests each way (default 2000)
    BENCH_STREAM_REQUESTS   sequential streams each way (default 1000)
    BENCH_PROFILE_SECONDS   seconds of py-spy profile under wrk; 0 skips it (default 8)
    BENCH_PROFILE_RAW       a file to keep py-spy's raw stacks in (for flamegraph.pl or speedscope)
    BENCH_WRITE_DOC         0 to print the table without touching docs/benchmarks.md
    BENCH_DAPHNE_ARGS       extra Daphne arguments, to try a change (e.g. "-v0": no access log)
    BENCH_FOOTPRINT         0 skips timing `make run` and reading its memory (default 1)
    BENCH_STARTS            timed starts of `make run` (default 3)
    BENCH_SOAK_REQUESTS     requests of the soak; 0 skips it (default 200000)
    DATABASE_URL, REDIS_URL used when set (a bench organization is created, then deleted);
                            otherwise a SQLite file in a temporary directory, and no Redis.

Every process it starts is stopped, and the temporary directory removed, on success, failure and
Ctrl-C alike. It exits non-zero when any gateway answer is not a 200 with the request-id header.
"""

import contextlib
import ctypes
import http.client
import json
import os
import platform
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from . import footprint, profile, report, soak
from .load import (
    WrkMissing,
    WrkResult,
    children_cpu_seconds,
    cpu_seconds,
    ensure_wrk,
    machine_busy_seconds,
    run_wrk,
)
from .seed import ANTHROPIC_UPSTREAM_MODEL, UPSTREAM_MODEL
from .sequential import BadResponse, Samples, Target, completions, stream_first_byte

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable  # the venv's interpreter: `make bench` runs this module with it
DOC = ROOT / "docs" / "benchmarks.md"
ASGI_APPLICATION = "gateway_project.asgi:application"
# What `make run` and the production layout serve with: Daphne, with the drain on SIGTERM and the
# garbage collector tuned (gateway_project/serve.py); it takes Daphne's arguments.
SERVER_MODULE = "gateway_project.serve"
WARM_UP = 300
# scripts/run.sh runs the Celery worker, and with it the audit ingest, at this lower priority.
INGEST_NICENESS = ("nice", "-n", "10")
MESSAGES = [{"role": "user", "content": "Say hello in a few words."}]


class Failed(Exception):
    """The run cannot produce numbers worth reporting."""


@dataclass(frozen=True)
class Config:
    seconds: int
    requests: int
    stream_requests: int
    profile_seconds: int
    profile_raw: Path | None
    write_doc: bool
    daphne_args: tuple[str, ...]
    footprint: bool
    starts: int
    soak_requests: int

    @classmethod
    def from_env(cls) -> "Config":
        def number(name: str, default: int) -> int:
            value = os.environ.get(name, "").strip()
            if not value:
                return default
            if not value.isdigit():
                raise SystemExit(f"{name} must be a whole number, not {value!r}")
            return int(value)

        return cls(
            seconds=max(1, number("BENCH_SECONDS", 10)),
            requests=max(100, number("BENCH_REQUESTS", 2000)),
            stream_requests=max(100, number("BENCH_STREAM_REQUESTS", 1000)),
            profile_seconds=number("BENCH_PROFILE_SECONDS", 8),
            profile_raw=Path(raw).resolve() if (raw := os.environ.get("BENCH_PROFILE_RAW")) else None,
            write_doc=os.environ.get("BENCH_WRITE_DOC", "1") != "0",
            daphne_args=tuple(shlex.split(os.environ.get("BENCH_DAPHNE_ARGS", ""))),
            footprint=os.environ.get("BENCH_FOOTPRINT", "1") != "0",
            starts=max(1, number("BENCH_STARTS", 3)),
            soak_requests=number("BENCH_SOAK_REQUESTS", 200_000),
        )


_began = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _began:5.1f}s] {message}", file=sys.stderr, flush=True)


# --- Processes --------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Runs in each child before exec: if the bench itself is killed outright (SIGKILL, where no
    cleanup code runs), Linux sends the child SIGTERM, so no server is left behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Processes:
    """The servers this run started; stopped (by pid, newest first) when the block exits. A process
    started with ``group=True`` (`make run`) is stopped with its whole process group: SIGTERM to the
    group, SIGKILL to what is left after 30 s."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: list[tuple[str, subprocess.Popen, Path]] = []
        self.groups: set[int] = set()

    def __enter__(self) -> "Processes":
        return self

    def __exit__(self, *exc_info) -> None:
        for _name, process, _log in reversed(self.running):
            if process.pid in self.groups:
                if process.poll() is None or footprint.group_members(process.pid):
                    footprint.stop_tree(process)
            elif process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def start(
        self, name: str, command: list[str], env: dict[str, str], *, group: bool = False, cwd: Path = ROOT
    ) -> subprocess.Popen:
        log = self.logs / f"{name}.log"
        process = subprocess.Popen(  # noqa: S603 - the bench's own servers
            command,
            cwd=cwd,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            # Its own session: Ctrl-C reaches only the bench, which then stops the servers in order.
            start_new_session=True,
            preexec_fn=_die_with_parent,  # the bench starts no threads, so preexec_fn is safe
        )
        self.running.append((name, process, log))
        if group:
            self.groups.add(process.pid)
        return process

    def log_tails(self, lines: int = 25) -> str:
        tails = []
        for name, _process, log in self.running:
            text = log.read_text(errors="replace").strip().splitlines()[-lines:] if log.exists() else []
            if text:
                tails.append(f"--- last lines of {name}'s log ---\n" + "\n".join(text))
        return "\n".join(tails)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_healthy(process: subprocess.Popen, port: int, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Failed(f"{name} exited with status {process.returncode} before it was ready")
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
    raise Failed(f"{name} did not answer /healthz within {timeout:.0f} s")


# --- The gateway's database -------------------------------------------------------------------


def gateway_env(data_dir: Path) -> dict[str, str]:
    """The environment of every gateway process (migrate, seed, Daphne). GATEWAY_DATA_DIR keeps the
    SQLite file, the generated secrets and Celery's file broker out of the developer's .gateway/."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gateway_project.settings",
        "GATEWAY_DATA_DIR": str(data_dir),
        "SECRET_KEY": secrets.token_urlsafe(48),
        "GATEWAY_ALLOW_PRIVATE_UPSTREAMS": "true",  # the stand-in listens on loopback
        "LOG_LEVEL": "WARNING",
        "DEBUG": "false",  # DEBUG keeps every SQL query in memory
        "PYTHONUNBUFFERED": "1",
    }


def run_django(args: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(  # noqa: S603 - manage.py and bench.seed
        [PYTHON, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise Failed(f"{what} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def delete_organization(organization_id: str, env: dict[str, str]) -> None:
    try:
        run_django(["-m", "bench.seed", "delete", organization_id], env, "deleting the bench organization")
    except (Failed, subprocess.SubprocessError) as error:  # cleanup must not hide the run's outcome
        say(f"warning: {error}")


def layout() -> str:
    """The layout `make run` serves in with this run's environment (README, "Two commands")."""
    if os.environ.get("DATABASE_URL") or os.environ.get("REDIS_URL"):
        database, redis = describe_database()
        return f"the production layout ({database}, Redis: {redis})"
    return "the embedded default (SQLite, no Redis, Celery on the file broker)"


def describe_database() -> tuple[str, str]:
    url = os.environ.get("DATABASE_URL", "")
    # Only the scheme: the URL may carry a password.
    database = f"{url.split(':', 1)[0]} from DATABASE_URL" if url else "SQLite in a temporary directory"
    redis = "REDIS_URL" if os.environ.get("REDIS_URL") else "none (in-process revocation and generations)"
    return database, redis


# --- Measuring --------------------------------------------------------------------------------


def chat_body(model: str, *, stream: bool, messages: list | None = None, **fields) -> bytes:
    payload = {"model": model, "messages": messages or MESSAGES, "max_tokens": 16, **fields}
    if stream:
        payload["stream"] = True
    return json.dumps(payload).encode()


def long_prompt(tokens: int = 4_000) -> list[dict]:
    """About ``tokens`` tokens (four characters each) of ordinary text, with one e-mail address
    and one phone number for the redaction policies to find."""
    paragraph = (
        "The quarterly report covers revenue, costs and the outlook for the next two quarters. "
        "Customer support resolved most tickets within a day, and the survey scores went up. "
    )
    text = (paragraph * (tokens * 4 // len(paragraph) + 1))[: tokens * 4 - 80]
    return [{"role": "user", "content": text + " Contact ada@example.com or +1 415 555 0100."}]


def measure_load(
    wrk: str, port: int, body: bytes, authorization: str | None, seconds: int, pids: dict[str, int]
) -> tuple[WrkResult, dict[str, float]]:
    """A wrk run, and the CPU seconds each watched process, wrk itself and everything else on the
    machine ("others": other people's tests, say) spent during it."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    machine_before, wrk_before = machine_busy_seconds(), children_cpu_seconds()
    result = run_wrk(wrk, port, body, authorization, seconds=seconds)
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    spent["wrk"] = children_cpu_seconds() - wrk_before
    spent["others"] = max(0.0, machine_busy_seconds() - machine_before - sum(spent.values()))
    return result, spent


def take_profile(
    config: Config, wrk: str, port: int, body: bytes, authorization: str, pid: int, workdir: Path
) -> tuple[profile.Profile | None, str]:
    """py-spy on the Daphne process during a separate wrk run (sampling slows the process, so
    this run's numbers are not the ones reported)."""
    if config.profile_seconds <= 0:
        return None, "skipped (BENCH_PROFILE_SECONDS=0)"
    spy = profile.py_spy()
    if spy is None:
        return None, "py-spy is not installed (pip install -e '.[bench]')"
    output, log = workdir / "profile.txt", workdir / "py-spy.log"
    # A second more than wrk runs: py-spy attaches first, and idle samples are not counted.
    recorder = profile.start_recording(spy, pid, config.profile_seconds + 1, output, log)
    try:
        time.sleep(0.5)
        run_wrk(wrk, port, body, authorization, seconds=config.profile_seconds)
        recorder.wait(timeout=config.profile_seconds + 30)
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.wait()
    if recorder.returncode != 0 or not output.exists():
        return None, f"py-spy failed: {log.read_text(errors='replace').strip()[-300:]}"
    if config.profile_raw:  # kept for flamegraph.pl or speedscope.app
        shutil.copyfile(output, config.profile_raw)
    return profile.parse(output.read_text()), ""


def machine() -> report.Machine:
    cpu_model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break

    def git(*args: str) -> str:
        command = ["git", *args]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)  # noqa: S603
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--", "apps", "gateway_project"):
        commit += " with uncommitted changes to apps/ or gateway_project/"
    database, redis = describe_database()
    return report.Machine(
        when=datetime.now(UTC),
        cpus=len(os.sched_getaffinity(0)),  # what `nproc` prints
        cpu_model=cpu_model,
        python=platform.python_version(),
        commit=commit,
        database=database,
        redis=redis,
    )


def run(config: Config, wrk: str, workdir: Path, processes: Processes, cleanup: contextlib.ExitStack):
    env = gateway_env(workdir / "data")
    upstream, upstream_port, seeded = start_upstream_and_seed(env, processes, cleanup)

    # Before the bench's own servers start, so that nothing else of the bench runs meanwhile; after
    # the seed, so that on a shared database `make run` finds an organization and creates no admin.
    started = measure_footprint(config, upstream_port, workdir, processes, cleanup)

    daphne, gateway_port = start_server(config, processes, "daphne", env, "the gateway (Daphne)")
    say(f"gateway (Daphne) on 127.0.0.1:{gateway_port} (pid {daphne.pid})")
    # Daphne appends each record to its spool; an ingest writes the spool into the database, here
    # its own process (`make run` runs the same loop as a thread of the Celery worker), at the
    # worker's lower CPU priority, as scripts/run.sh starts it.
    ingest = processes.start("outbox_ingest", [*INGEST_NICENESS, PYTHON, "manage.py", "outbox_ingest"], env)
    say(f"audit ingest process (pid {ingest.pid})")

    brand = env.get("GATEWAY_BRAND", "gateway").lower()
    authorization = f"Bearer {seeded['api_key']}"
    json_headers = {"content-type": "application/json"}

    def target(name: str, port: int, model: str, *, stream: bool) -> Target:
        if port == upstream_port:
            return Target(name, port, chat_body(model, stream=stream), json_headers)
        return Target(
            name,
            port,
            chat_body(model, stream=stream),
            {**json_headers, "authorization": authorization},
            required_header=f"x-{brand}-request-id",
        )

    direct = target("upstream", upstream_port, "gpt-4o-mini", stream=False)
    gateway = target("gateway", gateway_port, seeded["model"], stream=False)
    direct_stream = target("upstream stream", upstream_port, "gpt-4o-mini", stream=True)
    gateway_stream = target("gateway stream", gateway_port, seeded["model"], stream=True)

    try:
        for warm in (direct, gateway):
            completions(warm, WARM_UP)
        for warm in (direct_stream, gateway_stream):
            stream_first_byte(warm, WARM_UP // 3)
        say("warmed up")
        # The upstream alone and through the gateway in alternating blocks, so both see the same
        # machine: on a shared one, what else runs moves every number, and would otherwise move the
        # two runs' apart.
        sequential: dict[str, Samples] = {}
        sequential[direct.name], sequential[gateway.name] = alternating(direct, gateway, config.requests)
        sequential[direct_stream.name], sequential[gateway_stream.name] = alternating(
            direct_stream, gateway_stream, config.stream_requests, measure=stream_first_byte
        )
    except BadResponse as error:
        raise Failed(f"a bad answer during the sequential runs: {error}") from None
    say(
        f"sequential: {config.requests:,} requests and {config.stream_requests:,} streams each way, "
        "every answer a 200 with the request-id header"
    )
    # A budget and rate limits on the key: the same requests, alternating in blocks with the key
    # without them, so both see the same machine.
    limited = Target(
        "gateway with limits",
        gateway_port,
        gateway.body,
        {**json_headers, "authorization": f"Bearer {seeded['limited_api_key']}"},
        required_header=f"x-{brand}-request-id",
    )
    try:
        completions(limited, WARM_UP)
        without_limits, with_limits = alternating(gateway, limited, config.requests)
    except BadResponse as error:
        raise Failed(f"a bad answer during the run with limits: {error}") from None
    say(
        f"with a budget and rate limits on the key: p50 {with_limits.percentile(50):.2f} ms against "
        f"{without_limits.percentile(50):.2f} ms without"
    )
    pids = {"upstream": upstream.pid, "daphne": daphne.pid, "ingest": ingest.pid}
    apis = api_cases(config, seeded, upstream_port, gateway_port, direct, gateway, brand, pids)
    if apis.others_cores > report.NOISY_CPUS:
        say(f"warning: other processes used {apis.others_cores:.2f} CPUs during the API cases; expect noise")
    for case in apis.cases:
        say(
            f"{case.name}: adds p50 {case.added(50):.2f} ms against {apis.chat.added(50):.2f} ms for chat "
            f"completions ({case.added(50) - apis.chat.added(50):+.2f} ms); Daphne's CPU per request "
            f"{case.cpu_ms:.2f} ms against {apis.chat.cpu_ms:.2f} ms"
        )
    # Ten policies on a 4,000-token prompt: the same long request with a key the policies apply to
    # and one they do not, alternating.
    long_body = chat_body(seeded["model"], stream=False, messages=long_prompt())
    plain_long = Target(
        "gateway, long prompt", gateway_port, long_body, gateway.headers, gateway.required_header
    )
    policed_long = Target(
        "gateway, long prompt, ten policies",
        gateway_port,
        long_body,
        {**json_headers, "authorization": f"Bearer {seeded['policed_api_key']}"},
        required_header=gateway.required_header,
        required_value=(f"x-{brand}-policy-action", "redacted"),
    )
    # The cache: the same request at temperature 0, answered from L1 after its first time.
    l1 = Target(
        "gateway, L1 hit",
        gateway_port,
        chat_body(seeded["model"], stream=False, temperature=0),
        gateway.headers,
        gateway.required_header,
        required_value=(f"x-{brand}-cache", "l1"),
    )
    # A stored prompt that renders to the benchmark's own request, alternating with that request.
    templated = Target(
        "gateway, templated",
        gateway_port,
        json.dumps(
            {
                "model": seeded["model"],
                "messages": [],
                "prompt": {"id": seeded["template"], "variables": {"what": "hello"}},
            }
        ).encode(),
        gateway.headers,
        gateway.required_header,
    )
    try:
        completions(templated, WARM_UP)
        without_template, with_template = alternating(gateway, templated, config.requests)
        completions(policed_long, WARM_UP)
        without_policies, with_policies = alternating(plain_long, policed_long, config.requests)
        completions(Target("the first, a miss", gateway_port, l1.body, gateway.headers), 1)
        completions(l1, WARM_UP)
        l1_direct, l1_hits = alternating(direct, l1, config.requests)
    except BadResponse as error:
        raise Failed(f"a bad answer during the policies or cache runs: {error}") from None
    say(
        f"a templated request: p50 {with_template.percentile(50):.2f} ms against "
        f"{without_template.percentile(50):.2f} ms for the same request written out"
    )
    say(
        f"ten policies on a 4,000-token prompt: p50 {with_policies.percentile(50):.2f} ms against "
        f"{without_policies.percentile(50):.2f} ms without; an L1 hit: p50 {l1_hits.percentile(50):.2f} ms "
        f"against {l1_direct.percentile(50):.2f} ms straight to the upstream"
    )
    l2_hits = l2_direct = None
    if os.environ.get("REDIS_URL"):
        l2_direct, l2_hits = sequential_l2_hits(
            config, env, processes, seeded, gateway, direct, l1.body, brand
        )
        say(
            f"an L2 hit (a second gateway process without L1): p50 {l2_hits.percentile(50):.2f} ms against "
            f"{l2_direct.percentile(50):.2f} ms straight to the upstream"
        )
    semantic = json.loads(
        run_django(["-m", "bench.semantic", seeded["organization_id"]], env, "the L3 look-up measurement")
    )
    say(
        f"the L3 look-up at {semantic['entries']:,} entries of {semantic['dimensions']:,} dimensions: "
        f"a miss p50 {semantic['miss_p50_ms']:.2f} ms, a hit p50 {semantic['hit_p50_ms']:.2f} ms"
    )
    # Right after the gateway's own sequential run, under the same conditions (before wrk leaves the
    # audit ingest process a backlog to write).
    audit_off = sequential_without_audit(config, env, processes, seeded, authorization, json_headers, brand)
    say(
        "the same sequential run with the audit path switched off: "
        f"p50 {audit_off.percentile(50):.2f} ms, p99 {audit_off.percentile(99):.2f} ms"
    )

    pids = {"upstream": upstream.pid, "daphne": daphne.pid, "ingest": ingest.pid}
    load_direct, _ = measure_load(wrk, upstream_port, direct.body, None, config.seconds, pids)
    say(f"wrk straight to the upstream: {load_direct.requests_per_second:,.0f} requests/s")
    time.sleep(1)  # let the closed connections go
    load_gateway, spent = measure_load(wrk, gateway_port, gateway.body, authorization, config.seconds, pids)
    say(f"wrk through the gateway: {load_gateway.requests_per_second:,.0f} requests/s")
    others_cores = spent["others"] / load_gateway.seconds
    if others_cores > report.NOISY_CPUS:  # other work on the machine shifts every number
        say(f"warning: other processes used {others_cores:.2f} CPUs during that run; expect noisy numbers")
    for name, result in (("upstream", load_direct), ("gateway", load_gateway)):
        if result.status_errors or not result.requests:
            raise Failed(
                f"wrk against the {name} got {result.status_errors:,} non-2xx answers out of "
                f"{result.requests:,}:\n{result.output}"
            )
        if result.socket_errors:
            say(f"warning: wrk against the {name} saw {result.socket_errors} socket errors or timeouts")

    time.sleep(1)
    samples, profile_note = take_profile(
        config, wrk, gateway_port, gateway.body, authorization, daphne.pid, workdir
    )
    say(f"profile: {profile.headline(samples)}" if samples else f"no profile: {profile_note}")
    if daphne.poll() is not None:
        raise Failed("the gateway exited during the run")
    # After the gateway's own load runs: the traced server's requests leave the audit ingest a
    # backlog to write, which would take CPU from them.
    traced = traced_case(config, env, processes, gateway, wrk, daphne.pid)
    say(
        f"traces on at 100 %: p50 {traced.traced.percentile(50):.2f} ms against "
        f"{traced.plain.percentile(50):.2f} ms untraced; CPU per request {traced.traced_cpu_ms:.2f} ms "
        f"against {traced.plain_cpu_ms:.2f} ms; {traced.load.requests_per_second:,.0f} requests/s at 32 "
        "connections"
    )
    soaked = soak_daphne(config, wrk, gateway_port, seeded, authorization, daphne.pid)
    if daphne.poll() is not None:
        raise Failed("the gateway exited during the soak")

    return report.Results(
        machine=machine(),
        requests=config.requests,
        stream_requests=config.stream_requests,
        seconds=config.seconds,
        sequential_direct=sequential[direct.name],
        sequential_gateway=sequential[gateway.name],
        first_byte_direct=sequential[direct_stream.name],
        first_byte_gateway=sequential[gateway_stream.name],
        load_direct=load_direct,
        load_gateway=load_gateway,
        gateway_cpu_ms=spent["daphne"] * 1000 / load_gateway.requests,
        gateway_cores=spent["daphne"] / load_gateway.seconds,
        upstream_cpu_ms=spent["upstream"] * 1000 / load_gateway.requests,
        wrk_cores=spent["wrk"] / load_gateway.seconds,
        ingest_cores=spent["ingest"] / load_gateway.seconds,
        others_cores=others_cores,
        profile=profile.summary(samples) if samples else None,
        profile_note=profile_note,
        daphne_args=" ".join(config.daphne_args),
        sequential_gateway_without_audit=audit_off,
        sequential_without_limits=without_limits,
        sequential_with_limits=with_limits,
        sequential_without_template=without_template,
        sequential_with_template=with_template,
        sequential_without_policies=without_policies,
        sequential_with_policies=with_policies,
        l1_direct=l1_direct,
        l1_hits=l1_hits,
        l2_direct=l2_direct,
        l2_hits=l2_hits,
        semantic=semantic,
        apis=apis,
        footprint=started,
        soak=soaked,
        traced=traced,
    )


def start_server(
    config: Config, processes: Processes, name: str, env: dict[str, str], what: str
) -> tuple[subprocess.Popen, int]:
    """A gateway server as production starts one (``SERVER_MODULE``, with ``BENCH_DAPHNE_ARGS``) on a
    free port, once it answers /healthz."""
    port = free_port()
    command = [PYTHON, "-m", SERVER_MODULE, *config.daphne_args, "-b", "127.0.0.1", "-p", str(port)]
    server = processes.start(name, [*command, ASGI_APPLICATION], env)
    wait_until_healthy(server, port, what)
    return server, port


def start_upstream_and_seed(
    env: dict[str, str], processes: Processes, cleanup: contextlib.ExitStack
) -> tuple[subprocess.Popen, int, dict]:
    """What every bench run begins with: the stand-in upstream, the database of ``env`` migrated and
    bench.seed's organization in it. Returns the upstream's process and port, and what the seed made."""
    upstream_port = free_port()
    upstream = processes.start(
        "upstream", [PYTHON, "-m", "bench.upstream", "--port", str(upstream_port)], dict(os.environ)
    )
    wait_until_healthy(upstream, upstream_port, "the stand-in upstream")
    say(f"stand-in upstream on 127.0.0.1:{upstream_port} (pid {upstream.pid})")
    run_django(["manage.py", "migrate", "--noinput", "-v0"], env, "manage.py migrate")
    say(f"database migrated ({describe_database()[0]})")
    seeded = seed_organization(env, upstream_port, cleanup)
    say("organization, API key, provider key and model alias created")
    return upstream, upstream_port, seeded


def seed_organization(env: dict[str, str], upstream_port: int, cleanup: contextlib.ExitStack) -> dict:
    """bench.seed's organization in the database of ``env``; deleted at the end on a shared database."""
    seeded = json.loads(
        run_django(
            ["-m", "bench.seed", "create", "--upstream", f"http://127.0.0.1:{upstream_port}/v1"],
            env,
            "creating the bench organization",
        )
        .strip()
        .splitlines()[-1]
    )
    if os.environ.get("DATABASE_URL"):  # a shared database: take the bench's rows away again
        cleanup.callback(delete_organization, seeded["organization_id"], env)
    return seeded


def measure_footprint(
    config: Config, upstream_port: int, workdir: Path, processes: Processes, cleanup: contextlib.ExitStack
) -> footprint.Footprint | None:
    """The real `make run`, in its own data directory (its own SQLite file, spool and broker, or the
    run's DATABASE_URL and REDIS_URL): start-up time, stop time and idle memory (bench/footprint.py)."""
    if not config.footprint:
        say("`make run` not measured (BENCH_FOOTPRINT=0)")
        return None
    port = free_port()
    env = footprint.make_run_env(gateway_env(workdir / "make-run"), port)
    try:
        measured = footprint.measure(
            env=env,
            port=port,
            starts=config.starts,
            start=lambda name, command, env: processes.start(name, command, env, group=True),
            seed=lambda env: seed_organization(env, upstream_port, cleanup),
            say=say,
            layout=layout(),
        )
    except footprint.NotStarted as error:
        raise Failed(str(error)) from None
    server = measured.server
    say(
        f"`make run` idle after {footprint.IDLE_REQUESTS} requests: {measured.rss_mib:.0f} MiB RSS "
        f"({measured.pss_mib:.0f} MiB PSS) in {len(measured.processes)} processes; the server "
        + (f"{server.rss_mib:.0f} MiB RSS" if server else "process not found")
    )
    return measured


def soak_daphne(
    config: Config, wrk: str, port: int, seeded: dict, authorization: str, pid: int
) -> soak.Soak | None:
    """bench/soak.py against the bench's Daphne process."""
    if config.soak_requests <= 0:
        say("no soak (BENCH_SOAK_REQUESTS=0)")
        return None
    say(f"soak: {config.soak_requests:,} requests, every {soak.STREAM_EVERY}th streamed")
    plain, streamed = (chat_body(seeded["model"], stream=stream) for stream in (False, True))
    try:
        soaked = soak.run(wrk, port, plain, streamed, authorization, pid, config.soak_requests)
    except soak.SoakFailed as error:
        raise Failed(f"the soak: {error}") from None
    say(
        f"soak: {soaked.requests:,} requests ({soaked.streams:,} streams) in {soaked.seconds:.0f} s; Daphne "
        f"{soaked.first.rss_mib:.1f} MiB after {soaked.first.requests:,}, {soaked.rest.rss_mib:.1f} MiB "
        f"after {soaked.requests:,} ({soaked.growth:+.1%})"
    )
    return soaked


def alternating(
    first: Target,
    second: Target,
    count: int,
    blocks: int = 10,
    measure: Callable[[Target, int], Samples] = completions,
) -> tuple[Samples, Samples]:
    """``count`` sequential requests to each target, in alternating blocks."""
    results = (Samples(), Samples())
    for _ in range(blocks):
        for target, samples in zip((first, second), results, strict=True):
            samples.seconds.extend(measure(target, max(1, count // blocks)).seconds)
    return results


ANTHROPIC_HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}


def responses_body(model: str) -> bytes:
    """The chat case's request as a Response request. ``store: false``: a stored turn (written to the
    hot tier, then by the ingest) is the conversation's cost, not measured here."""
    payload = {"model": model, "input": MESSAGES[0]["content"], "max_output_tokens": 16, "store": False}
    return json.dumps(payload).encode()


def messages_body(model: str) -> bytes:
    """The chat case's request as an Anthropic Messages request."""
    return json.dumps({"model": model, "max_tokens": 16, "messages": MESSAGES}).encode()


def api_cases(
    config: Config,
    seeded: dict,
    upstream_port: int,
    gateway_port: int,
    direct: Target,
    gateway: Target,
    brand: str,
    pids: dict[str, int],
) -> report.ApiCases:
    """The Responses and Messages APIs, each native and bridged, against the chat case: every case's
    added latency is the gateway's time less that of the upstream endpoint the gateway calls for it,
    called directly (a bridged Responses request reaches Anthropic's /v1/messages, a bridged Messages
    request OpenAI's /v1/chat/completions). All of them, the chat case and the three upstream
    endpoints take turns in blocks, so each sees the same machine."""
    openai_model, anthropic_model = seeded["model"], seeded["anthropic_model"]
    required = f"x-{brand}-request-id"
    bearer = {"content-type": "application/json", "authorization": f"Bearer {seeded['api_key']}"}
    x_api_key = {**ANTHROPIC_HEADERS, "x-api-key": seeded["api_key"]}  # as the Anthropic SDK sends it
    direct_responses = Target(
        "upstream /v1/responses",
        upstream_port,
        responses_body(UPSTREAM_MODEL),
        {"content-type": "application/json"},
        path="/v1/responses",
    )
    direct_messages = Target(
        "upstream /v1/messages",
        upstream_port,
        messages_body(ANTHROPIC_UPSTREAM_MODEL),
        {**ANTHROPIC_HEADERS, "x-api-key": "sk-ant-bench-upstream"},
        path="/v1/messages",
    )

    def responses(name: str, model: str, upstream: Target) -> tuple[Target, Target]:
        body, shape = responses_body(model), b'"object":"response"'
        measured = Target(
            name, gateway_port, body, bearer, required, path="/v1/responses", required_body=shape
        )
        return measured, upstream

    def messages(name: str, model: str, upstream: Target) -> tuple[Target, Target]:
        body, shape = messages_body(model), b'"type":"message"'
        measured = Target(
            name, gateway_port, body, x_api_key, required, path="/v1/messages", required_body=shape
        )
        return measured, upstream

    cases = [
        responses("Responses, native (openai)", openai_model, direct_responses),
        responses("Responses, bridged (anthropic)", anthropic_model, direct_messages),
        messages("Messages, native (anthropic)", anthropic_model, direct_messages),
        messages("Messages, bridged (openai)", openai_model, direct),
    ]
    directs = (direct, direct_responses, direct_messages)
    targets = (*directs, gateway, *(measured for measured, _ in cases))
    samples = {target.name: Samples() for target in targets}
    # Daphne's CPU seconds in each target's blocks: unlike latency, hardly moved by other work.
    daphne_cpu = dict.fromkeys(samples, 0.0)
    # Twenty blocks, not ten: eight targets take turns, and a burst of other work should land in
    # the blocks of several of them, not mostly in one.
    blocks = 20
    per_block = max(1, config.requests // blocks)
    try:
        for warm in targets:
            completions(warm, WARM_UP)
        before = _cpu_snapshot(pids)
        for _ in range(blocks):
            for target in targets:
                began = cpu_seconds(pids["daphne"])
                samples[target.name].seconds.extend(completions(target, per_block).seconds)
                daphne_cpu[target.name] += cpu_seconds(pids["daphne"]) - began
        after = _cpu_snapshot(pids)
    except BadResponse as error:
        raise Failed(f"a bad answer during the Responses and Messages runs: {error}") from None

    def measured(name: str, upstream: Target, through: Target) -> report.ApiCase:
        cpu_ms = daphne_cpu[through.name] * 1000 / len(samples[through.name].seconds)
        return report.ApiCase(name, upstream.path, samples[upstream.name], samples[through.name], cpu_ms)

    return report.ApiCases(
        chat=measured("Chat completions (openai)", direct, gateway),
        cases=[measured(through.name, upstream, through) for through, upstream in cases],
        others_cores=_others_cores(before, after),
    )


def _cpu_snapshot(pids: dict[str, int]) -> tuple[float, float, float]:
    """Wall time, the machine's busy CPU seconds, and the bench's own: this process (the sequential
    client) and its servers."""
    ours = time.process_time() + sum(cpu_seconds(pid) for pid in pids.values())
    return time.monotonic(), machine_busy_seconds(), ours


def _others_cores(before: tuple[float, float, float], after: tuple[float, float, float]) -> float:
    """The CPUs other work on the machine used between two snapshots (other people's tests, say)."""
    wall, busy, ours = (a - b for a, b in zip(after, before, strict=True))
    return max(0.0, busy - ours) / wall if wall > 0 else 0.0


def sequential_l2_hits(
    config, env, processes, seeded, gateway, direct, body, brand
) -> tuple[Samples, Samples]:
    """The L1 case's request against a second Daphne whose L1 holds nothing
    (GATEWAY_CACHE_L1_MAX_ENTRIES=0): every answer an L2 hit, alternating with the upstream."""
    server, port = start_server(
        config,
        processes,
        "daphne-without-l1",
        {**env, "GATEWAY_CACHE_L1_MAX_ENTRIES": "0"},
        "the gateway without L1",
    )
    l2 = Target(
        "gateway, L2 hit",
        port,
        body,
        gateway.headers,
        gateway.required_header,
        required_value=(f"x-{brand}-cache", "l2"),
    )
    try:
        completions(l2, WARM_UP)
        return alternating(direct, l2, config.requests)
    except BadResponse as error:
        raise Failed(f"a bad answer from the gateway without L1: {error}") from None
    finally:
        server.terminate()


def sequential_without_audit(config, env, processes, seeded, authorization, json_headers, brand) -> Samples:
    """The sequential gateway run again against a second Daphne with GATEWAY_AUDIT_ENABLED=false:
    what the audit path costs a request is the difference."""
    server, port = start_server(
        config,
        processes,
        "daphne-without-audit",
        {**env, "GATEWAY_AUDIT_ENABLED": "false"},
        "the gateway without its audit path",
    )
    measured = Target(
        "gateway without audit",
        port,
        chat_body(seeded["model"], stream=False),
        {**json_headers, "authorization": authorization},
        required_header=f"x-{brand}-request-id",
    )
    try:
        completions(measured, WARM_UP)
        return completions(measured, config.requests)
    except BadResponse as error:
        raise Failed(f"a bad answer from the gateway without its audit path: {error}") from None
    finally:
        server.terminate()


def traced_case(config, env, processes, gateway: Target, wrk: str, gateway_pid: int) -> "report.TracedCase":
    """A second Daphne with traces on at 100 % sampling, exporting to a stand-in collector
    (bench/otlp_sink.py): the sequential requests alternating with the untraced gateway, and a wrk
    run against it, each with its process's CPU."""
    sink_port = free_port()
    sink = processes.start("otlp-sink", [PYTHON, "-m", "bench.otlp_sink", "--port", str(sink_port)], env)
    wait_until_healthy(sink, sink_port, "the stand-in OTLP collector")
    traced_env = {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
        "OTEL_TRACES_SAMPLER": "always_on",
        "OTEL_SERVICE_NAME": "gateway-bench",
    }
    server, port = start_server(config, processes, "daphne-traced", traced_env, "the gateway with traces")
    traced = Target("gateway, traced", port, gateway.body, gateway.headers, gateway.required_header)
    try:
        completions(traced, WARM_UP)
        cpu_before = cpu_seconds(gateway_pid), cpu_seconds(server.pid)
        plain, with_traces = alternating(gateway, traced, config.requests)
        cpu_after = cpu_seconds(gateway_pid), cpu_seconds(server.pid)
        time.sleep(1)
        load, spent = measure_load(
            wrk, port, gateway.body, gateway.headers["authorization"], config.seconds, {"daphne": server.pid}
        )
        if load.status_errors or not load.requests:
            raise Failed(f"wrk against the traced gateway got {load.status_errors:,} non-2xx answers")
        exported = _get_json(sink_port, "/healthz")
    except BadResponse as error:
        raise Failed(f"a bad answer from the traced gateway: {error}") from None
    finally:
        server.terminate()
        sink.terminate()
    count = len(plain.seconds)
    return report.TracedCase(
        plain=plain,
        traced=with_traces,
        plain_cpu_ms=(cpu_after[0] - cpu_before[0]) * 1000 / count,
        traced_cpu_ms=(cpu_after[1] - cpu_before[1]) * 1000 / count,
        load=load,
        load_cpu_ms=spent["daphne"] * 1000 / load.requests,
        exported_bytes=exported["bytes"],
        exports=exported["exports"],
    )


def _get_json(port: int, path: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def _stop(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    config = Config.from_env()
    try:
        wrk = ensure_wrk()
    except WrkMissing as error:
        print(error, file=sys.stderr)
        return 2
    # `kill` or a closed terminal stop the run the way Ctrl-C does: through the cleanup below.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp,
            contextlib.ExitStack() as cleanup,
            Processes(Path(tmp)) as processes,
        ):
            try:
                results = run(config, wrk, Path(tmp), processes, cleanup)
            except Failed as error:
                print(f"\nbench FAILED: {error}\n", file=sys.stderr)
                print(processes.log_tails(), file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        print("\nbench interrupted; servers stopped and temporary files removed", file=sys.stderr)
        return 130
    print()
    print(report.context(results))
    print()
    print(report.table(results))
    print()
    print(report.notes(results))
    if results.traced is not None:
        print()
        print(report.traced_note(results))
    if results.apis is not None:
        print()
        print(report.apis_section(results.apis))
    if results.footprint is not None:
        print()
        print(report.footprint_section(results.footprint))
    if results.soak is not None:
        print()
        print(report.soak_note(results.soak))
    if config.write_doc:
        report.write_doc(DOC, report.block(results))
        print(f"\nWrote the results to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
