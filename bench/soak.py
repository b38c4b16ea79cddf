"""The soak: does one server process's memory stay flat over 200,000 requests, streams included?

A leak of a few hundred bytes a request is invisible in a ten-second wrk run and is a restart a week
in production. So wrk (bench/soak.lua, 32 connections) sends the bench's chat request, every fourth
one streamed, to the bench's Daphne process until ``BENCH_SOAK_REQUESTS`` answers (default 200,000;
about three minutes here); the process's RSS (``VmRSS``) is read after the first tenth, once the
caches, pools and the allocator's arenas have grown to their working size, and at the end, each time
after two idle seconds. The issue's target: the end within 10 % of the first reading. Every answer
must be a 2xx and every streamed answer must end with ``data: [DONE]``.

wrk counts answers per thread and stops each thread at its share (bench/soak.lua); the bench then
interrupts wrk, which prints its summary. The requests in flight when a thread stops are not counted.
"""

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

LUA = Path(__file__).with_name("soak.lua")
STREAM_EVERY = 4
THREADS = 2
CONNECTIONS = 32
SETTLE_SECONDS = 2.0
TARGET_GROWTH = 0.10  # issue 23: within 10 % of the RSS after the first tenth


class SoakFailed(Exception):
    """An answer that was not a 2xx, or a stream cut short."""


@dataclass
class Leg:
    requests: int
    streams: int
    seconds: float
    rss_mib: float  # the server's, after the leg and SETTLE_SECONDS

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


@dataclass
class Soak:
    rss_before_mib: float
    first: Leg  # the first tenth
    rest: Leg

    @property
    def requests(self) -> int:
        return self.first.requests + self.rest.requests

    @property
    def streams(self) -> int:
        return self.first.streams + self.rest.streams

    @property
    def seconds(self) -> float:
        return self.first.seconds + self.rest.seconds

    @property
    def growth(self) -> float:
        """The RSS at the end against after the first tenth: 0.05 is 5 % more."""
        return self.rest.rss_mib / self.first.rss_mib - 1 if self.first.rss_mib else 0.0

    @property
    def met(self) -> bool:
        return self.growth <= TARGET_GROWTH


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _leg(wrk: str, port: int, bodies: tuple[bytes, bytes], authorization: str, count: int, pid: int) -> Leg:
    env = {
        **os.environ,
        "BENCH_BODY": bodies[0].decode(),
        "BENCH_STREAM_BODY": bodies[1].decode(),
        "BENCH_STREAM_EVERY": str(STREAM_EVERY),
        "BENCH_AUTHORIZATION": authorization,
        "BENCH_LIMIT": str(count),
        "BENCH_THREADS": str(THREADS),
    }
    # wrk stops on the count; the duration is only a bound (100 requests/s would be a broken server).
    seconds = max(60, count // 100)
    command = [
        wrk,
        f"-t{THREADS}",
        f"-c{CONNECTIONS}",
        f"-d{seconds}s",
        "-s",
        str(LUA),
        f"http://127.0.0.1:{port}/v1/chat/completions",
    ]
    stdout = _run_until_done(command, env, seconds + 60)
    line = next((x for x in stdout.splitlines() if x.startswith("BENCH_JSON ")), None)
    if line is None:
        raise SoakFailed(f"wrk printed no summary:\n{stdout}")
    data = json.loads(line.removeprefix("BENCH_JSON "))
    if data["status_errors"] or data["cut_streams"] or not data["requests"]:
        raise SoakFailed(
            f"{data['status_errors']:,} error answers and {data['cut_streams']:,} streams cut short of "
            f"{data['requests']:,} answers:\n{stdout}"
        )
    time.sleep(SETTLE_SECONDS)
    return Leg(data["requests"], data["streams"], data["duration_us"] / 1e6, rss_mib(pid))


def _run_until_done(command: list[str], env: dict[str, str], timeout: float) -> str:
    """wrk's output; SIGINT to it once every thread has printed BENCH_THREAD_DONE. Killed, and a
    SoakFailed, past ``timeout``."""
    process = subprocess.Popen(  # noqa: S603 - the bench's own command line
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines, finished = [], 0
    deadline = time.monotonic() + timeout
    try:
        assert process.stdout is not None
        for line in process.stdout:  # ends when wrk exits (-d is the bound)
            lines.append(line)
            if line.startswith("BENCH_THREAD_DONE"):
                finished += 1
                if finished == THREADS:
                    process.send_signal(signal.SIGINT)
            if time.monotonic() > deadline:
                break
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
            raise SoakFailed(f"wrk did not finish within {timeout:.0f} s:\n{''.join(lines)}")
    if process.returncode != 0:
        raise SoakFailed(f"wrk failed ({process.returncode}):\n{''.join(lines)}")
    return "".join(lines)


def run(
    wrk: str, port: int, plain: bytes, streamed: bytes, authorization: str, pid: int, requests: int
) -> Soak:
    """``requests`` answers from the server process ``pid`` on ``port``: the first tenth, then the rest."""
    before = rss_mib(pid)
    first_count = max(1, requests // 10)
    first = _leg(wrk, port, (plain, streamed), authorization, first_count, pid)
    rest = _leg(wrk, port, (plain, streamed), authorization, max(1, requests - first.requests), pid)
    return Soak(rss_before_mib=before, first=first, rest=rest)
