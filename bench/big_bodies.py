"""`python -m bench.big_bodies`: what a few bodies near the 20 MiB limit do to everyone else.

Starts the stand-in upstream, one Daphne process and the audit ingest (as `make bench` does), then
sends small chat requests one after another for the whole run (the probe) while another client
sends big bodies now and then. It reports the probe's latencies while nothing big is in flight and
while the big bodies are, its worst latency (a stall of the event loop shows up there whole), and
Daphne's resident memory before, after the big bodies, and once the run has settled.

Settings (environment):
    BIG_BODIES          how many big bodies of each shape (default 5)
    BIG_BODY_MIB        their size in MiB (default 19.9)
    DATABASE_URL, REDIS_URL   as for `make bench`
"""

import contextlib
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from .run import (
    ASGI_APPLICATION,
    PYTHON,
    Processes,
    free_port,
    gateway_env,
    say,
    start_upstream_and_seed,
    wait_until_healthy,
)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def big_bodies(model: str, size: int) -> dict[str, bytes]:
    """The shapes a big body takes: one long message (JSON's cheapest case), many short messages
    (many small objects to parse and walk), and embeddings as token arrays (millions of numbers)."""
    text = "The quarterly report covers revenue, costs and the outlook. " * (size // 61)
    one = {"model": model, "messages": [{"role": "user", "content": text[: size - 200]}], "max_tokens": 16}
    message = {"role": "user", "content": "a short line of a long chat"}
    count = size // (len(json.dumps(message)) + 2)
    many = {"model": model, "messages": [message] * count, "max_tokens": 16}
    tokens = [[1234, 5678, 91011, 1213] * 16] * (size // 420)
    embeddings = {"model": model, "input": tokens}
    return {
        "one long message": json.dumps(one).encode(),
        "many messages": json.dumps(many).encode(),
        "embeddings token arrays": json.dumps(embeddings).encode(),
    }


def main() -> int:
    count = int(os.environ.get("BIG_BODIES", "5"))
    size = int(float(os.environ.get("BIG_BODY_MIB", "19.9")) * 1024 * 1024)
    with (
        tempfile.TemporaryDirectory(prefix="gateway-big-bodies-") as workdir,
        Processes(Path(workdir)) as processes,
    ):
        cleanup = contextlib.ExitStack()
        with cleanup:
            return run(Path(workdir), processes, cleanup, count, size)


def run(workdir: Path, processes: Processes, cleanup: contextlib.ExitStack, count: int, size: int) -> int:
    env = gateway_env(workdir / "data")
    _, _, seeded = start_upstream_and_seed(env, processes, cleanup)
    port = free_port()
    daphne = processes.start(
        "daphne", [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), ASGI_APPLICATION], env
    )
    wait_until_healthy(daphne, port, "the gateway (Daphne)")
    processes.start("outbox_ingest", [PYTHON, "manage.py", "outbox_ingest"], env)
    headers = {"content-type": "application/json", "authorization": f"Bearer {seeded['api_key']}"}
    small = json.dumps(
        {"model": seeded["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    ).encode()
    bodies = big_bodies(seeded["model"], size)

    def post(connection: http.client.HTTPConnection, path: str, body: bytes) -> int:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status

    probe = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(300):
        post(probe, "/v1/chat/completions", small)
    rss_before = rss_mib(daphne.pid)
    say(f"warmed up; Daphne resident {rss_before:.0f} MiB")

    samples: list[tuple[float, float, bool]] = []  # (start, seconds, a big body in flight)
    busy = threading.Event()
    stop = threading.Event()

    def probing() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            status = post(probe, "/v1/chat/completions", small)
            samples.append((began, time.perf_counter() - began, busy.is_set()))
            if status != 200:
                raise SystemExit(f"the probe got HTTP {status}")

    thread = threading.Thread(target=probing, daemon=True)
    thread.start()
    time.sleep(3)  # the probe alone first
    big = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    results: dict[str, list[tuple[int, float]]] = {}
    for name, body in bodies.items():
        path = "/v1/embeddings" if "embeddings" in name else "/v1/chat/completions"
        for _ in range(count):
            busy.set()
            began = time.perf_counter()
            status = post(big, path, body)
            results.setdefault(name, []).append((status, time.perf_counter() - began))
            busy.clear()
            time.sleep(1)
    rss_after = rss_mib(daphne.pid)
    time.sleep(5)
    stop.set()
    thread.join()
    rss_settled = rss_mib(daphne.pid)

    quiet = sorted(s for _, s, b in samples if not b)
    loaded = sorted(s for _, s, b in samples if b)

    def p(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(len(values) * q))] * 1000 if values else 0.0

    print(f"big bodies: {count} of each shape, {size / 2**20:.1f} MiB")
    for name, outcomes in results.items():
        statuses = sorted({s for s, _ in outcomes})
        mean = statistics.mean(t for _, t in outcomes) * 1000
        print(f"  {name}: {len(bodies[name]) / 2**20:.1f} MiB, HTTP {statuses}, {mean:.0f} ms each")
    print(
        f"probe while quiet: {len(quiet)} requests, p50 {p(quiet, 0.5):.1f} ms, p99 {p(quiet, 0.99):.1f} ms"
    )
    print(
        f"probe while a big body is in flight: {len(loaded)} requests, p50 {p(loaded, 0.5):.1f} ms, "
        f"p99 {p(loaded, 0.99):.1f} ms, worst {max(loaded, default=0) * 1000:.0f} ms"
    )
    print(f"Daphne resident: {rss_before:.0f} MiB before, {rss_after:.0f} after, {rss_settled:.0f} settled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
