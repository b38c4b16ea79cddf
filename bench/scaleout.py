"""Throughput with 1, 2 and 4 server processes on one port (WEB_CONCURRENCY), in each way of sharing
the port (GATEWAY_SERVER_SOCKET: shared, reuseport): wrk at 32 connections for BENCH_SECONDS each,
the requests per second, the server processes' CPU per request, and how evenly the processes were
busy (the least busy one's CPU against the busiest one's).

    DATABASE_URL=... REDIS_URL=... python -m bench.scaleout

Needs PostgreSQL and Redis (several processes share their state through Redis). Prints a markdown
table for docs/benchmarks.md ("Several processes"). On a 2-core machine that also runs wrk, the
upstream, PostgreSQL, Redis and the audit ingest, more processes than cores only add contention:
the curve says what this machine gives, not what a bigger one would.
"""

import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from .load import cpu_seconds, ensure_wrk, run_wrk
from .run import (
    INGEST_NICENESS,
    PYTHON,
    Processes,
    chat_body,
    free_port,
    gateway_env,
    say,
    start_upstream_and_seed,
    wait_until_healthy,
)

COUNTS = (1, 2, 4)
MODES = ("shared", "reuseport")


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def main() -> int:
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        print("bench.scaleout needs DATABASE_URL and REDIS_URL", file=sys.stderr)
        return 2
    seconds = int(os.environ.get("BENCH_SECONDS", "10"))
    wrk = ensure_wrk()
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="gateway-scaleout-") as tmp,
        contextlib.ExitStack() as cleanup,
        Processes(Path(tmp)) as processes,
    ):
        env = gateway_env(Path(tmp) / "data")
        _, _, seeded = start_upstream_and_seed(env, processes, cleanup)
        processes.start("outbox_ingest", [*INGEST_NICENESS, PYTHON, "manage.py", "outbox_ingest"], env)
        body = chat_body(seeded["model"], stream=False)
        authorization = f"Bearer {seeded['api_key']}"
        for mode in MODES:
            for count in COUNTS:
                port = free_port()
                server_env = {**env, "WEB_CONCURRENCY": str(count), "GATEWAY_SERVER_SOCKET": mode}
                command = [
                    PYTHON,
                    "-m",
                    "gateway_project.server_processes",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                ]
                supervisor = processes.start(
                    f"servers-{mode}-{count}", [*command, "gateway_project.asgi:application"], server_env
                )
                wait_until_healthy(supervisor, port, f"{count} server processes")
                servers = children(supervisor.pid) if count > 1 else [supervisor.pid]
                run_wrk(wrk, port, body, authorization, seconds=2)  # warm every process
                before = {pid: cpu_seconds(pid) for pid in servers}
                result = run_wrk(wrk, port, body, authorization, seconds=seconds)
                spent = {pid: cpu_seconds(pid) - before[pid] for pid in servers}
                supervisor.terminate()
                supervisor.wait(60)
                time.sleep(1)
                busiest = max(spent.values())
                rows.append(
                    (
                        mode,
                        count,
                        result.requests_per_second,
                        sum(spent.values()) * 1000 / max(1, result.requests),
                        min(spent.values()) / busiest if busiest else 0.0,
                        result.p50_ms,
                        result.p99_ms,
                    )
                )
                say(f"{mode}, {count} process(es): {result.requests_per_second:,.0f} requests/s")
    print()
    print("| socket | processes | requests/s | CPU per request | least/most busy process | p50 | p99 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, count, rate, cpu, balance, p50, p99 in rows:
        print(
            f"| {mode} | {count} | {rate:,.0f} | {cpu:.2f} ms | {balance:.2f} | {p50:.1f} ms | {p99:.1f} ms |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
