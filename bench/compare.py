"""Before and after in one run: the same measurements against the gateway of several commits, side by
side, so a change is judged on the same machine at the same moment (other work on a shared machine
moves every absolute number; it moves two servers measured in turns alike).

    python -m bench.compare d3b9e30 HEAD          # any git refs; HEAD is the working tree as it is
    BENCH_COMPARE_ROUNDS=6 python -m bench.compare main~3 main

One stand-in upstream and one database, migrated and seeded by the working tree's code (the refs
compared must share its migrations). Each ref other than HEAD is checked out into a temporary
worktree and served from there: ``gateway_project.serve`` where the ref has it, else ``daphne``.
Then, for ``BENCH_COMPARE_ROUNDS`` rounds (default 4), the order rotated every round: a block of
sequential requests and a wrk run at 32 connections against each server, with its process's CPU.
Prints the median (and range) of each number per ref. The layout is the environment's, as for
``make bench``: SQLite and no Redis, or DATABASE_URL and REDIS_URL. Not part of ``make bench``.
"""

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .load import cpu_seconds, ensure_wrk, run_wrk
from .run import (
    PYTHON,
    ROOT,
    Processes,
    chat_body,
    free_port,
    gateway_env,
    say,
    start_upstream_and_seed,
    wait_until_healthy,
)
from .sequential import Target, completions

SEQUENTIAL = 500
WRK_SECONDS = 8


def number(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else default


def checkout(ref: str, into: Path) -> Path:
    """The tree of ``ref``: the working tree itself for HEAD, else a detached worktree."""
    if ref == "HEAD":
        return ROOT
    subprocess.run(  # noqa: S603 - git with the caller's ref
        ["git", "worktree", "add", "--detach", "--force", str(into), ref],  # noqa: S607
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return into


def server_command(tree: Path, port: int) -> list[str]:
    module = "gateway_project.serve" if (tree / "gateway_project" / "serve.py").exists() else "daphne"
    return [PYTHON, "-m", module, "-b", "127.0.0.1", "-p", str(port), "gateway_project.asgi:application"]


def main() -> int:
    refs = sys.argv[1:] or ["HEAD"]
    rounds = number("BENCH_COMPARE_ROUNDS", 4)
    wrk = ensure_wrk()
    results: dict[str, dict[str, list[float]]] = {ref: {} for ref in refs}
    with (
        tempfile.TemporaryDirectory(prefix="gateway-compare-") as tmp,
        contextlib.ExitStack() as cleanup,
        Processes(Path(tmp)) as processes,
    ):
        workdir = Path(tmp)
        env = gateway_env(workdir / "data")
        _, _, seeded = start_upstream_and_seed(env, processes, cleanup)
        servers = {}
        for index, ref in enumerate(refs):
            tree = checkout(ref, workdir / f"tree-{index}")
            if tree != ROOT:
                remove = ["git", "worktree", "remove", "--force", str(tree)]
                cleanup.callback(subprocess.run, remove, cwd=ROOT, check=False)
            port = free_port()
            # Each server imports its own tree's code (its working directory comes first on the path)
            # and keeps a spool directory of its own.
            server_env = {**env, "GATEWAY_OUTBOX_DIR": str(workdir / f"outbox-{index}")}
            process = processes.start(f"server-{index}", server_command(tree, port), server_env, cwd=tree)
            wait_until_healthy(process, port, f"the gateway of {ref}")
            servers[ref] = (port, process.pid)
            say(f"{ref}: serving on 127.0.0.1:{port} (pid {process.pid}) from {tree}")

        authorization = f"Bearer {seeded['api_key']}"
        body = chat_body(seeded["model"], stream=False)
        headers = {"content-type": "application/json", "authorization": authorization}
        for ref, (port, _pid) in servers.items():
            completions(Target(ref, port, body, headers), 300)  # warm up
        for round_number in range(rounds):
            order = refs[round_number % len(refs) :] + refs[: round_number % len(refs)]
            for ref in order:
                port, pid = servers[ref]
                began = cpu_seconds(pid)
                sequential = sorted(completions(Target(ref, port, body, headers), SEQUENTIAL).seconds)
                sequential_cpu = (cpu_seconds(pid) - began) * 1000 / SEQUENTIAL
                began = cpu_seconds(pid)
                load = run_wrk(wrk, port, body, authorization, seconds=WRK_SECONDS)
                load_cpu = (cpu_seconds(pid) - began) * 1000 / max(1, load.requests)
                row = {
                    "sequential p50 ms": sequential[len(sequential) // 2] * 1000,
                    "sequential CPU ms": sequential_cpu,
                    "requests/s": load.requests_per_second,
                    "load p50 ms": load.p50_ms,
                    "load p99 ms": load.p99_ms,
                    "load CPU ms": load_cpu,
                }
                for name, value in row.items():
                    results[ref].setdefault(name, []).append(value)
                say(f"round {round_number + 1}, {ref}: " + ", ".join(f"{k} {v:,.2f}" for k, v in row.items()))
    print()
    names = list(next(iter(results.values())))
    print("| ref | " + " | ".join(names) + " |")
    print("| --- |" + " ---: |" * len(names))
    for ref, row in results.items():
        cells = [f"{statistics.median(v):,.2f} [{min(v):,.2f}-{max(v):,.2f}]" for v in row.values()]
        print(f"| {ref} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
