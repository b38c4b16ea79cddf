"""Throughput at 32 connections with wrk (never a Python load loop: on a 2-core machine the load
generator's own CPU cost decides how much is left for the gateway, and wrk's is small)."""

import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

LUA = Path(__file__).with_name("post.lua")


class WrkMissing(Exception):
    pass


@dataclass
class WrkResult:
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    status_errors: int
    socket_errors: int
    output: str  # wrk's own report, kept for the log

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds


def ensure_wrk() -> str:
    """wrk's path; installs Debian's package when running as root, else says how."""
    path = shutil.which("wrk")
    if path:
        return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk is missing; installing it: apt-get install -y wrk", file=sys.stderr)
        install = ["apt-get", "install", "-y", "-q", "wrk"]
        if subprocess.run(install, check=False).returncode != 0:  # noqa: S603 - fixed command
            # A fresh container may have no package lists yet.
            subprocess.run(["apt-get", "update", "-q"], check=False)  # noqa: S607
            subprocess.run(install, check=False)  # noqa: S603
        path = shutil.which("wrk")
        if path:
            return path
    raise WrkMissing(
        "wrk is not installed and could not be installed here. Install it and run again:\n"
        "    sudo apt-get install -y wrk        (Debian/Ubuntu)\n"
        "    brew install wrk                   (macOS)"
    )


def run_wrk(
    wrk: str, port: int, body: bytes, authorization: str | None, *, seconds: int, connections: int = 32
) -> WrkResult:
    env = {**os.environ, "BENCH_BODY": body.decode(), "BENCH_AUTHORIZATION": authorization or ""}
    command = [
        wrk,
        "-t2",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(LUA),
        f"http://127.0.0.1:{port}/v1/chat/completions",
    ]
    done = subprocess.run(  # noqa: S603 - the bench's own command line
        command, env=env, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{done.stdout}\n{done.stderr}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    return WrkResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        p50_ms=data["p50_us"] / 1000,
        p90_ms=data["p90_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        max_ms=data["max_us"] / 1000,
        status_errors=data["status_errors"],
        socket_errors=data["connect_errors"] + data["read_errors"] + data["write_errors"] + data["timeouts"],
        output=done.stdout.split("BENCH_JSON")[0].rstrip(),
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every CPU, every process), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's children that have been waited for (wrk, once it is done)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
