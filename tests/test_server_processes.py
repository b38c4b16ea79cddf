"""WEB_CONCURRENCY=N: N server processes on one port (gateway_project/server_processes.py), each
mode of sharing it; what must hold across them (revocation, rate limits) holds; SIGTERM stops all."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.keys import services as key_services
from apps.limits.services import limits_set
from gateway_project import access_log
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import ROOT, free_port, subprocess_env, until, wait_until_serving
from tests.test_shutdown import Gateway, session_alive
from tests.upstreams import upstream  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
COMMAND = [sys.executable, "-m", "gateway_project.server_processes"]


def children_of(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry.name))
    return children


def start_and_wait(env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [*COMMAND, "-p", str(free_port())]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)


def test_more_than_one_process_without_redis_is_refused_with_the_reason(tmp_path):
    env = subprocess_env(tmp_path, WEB_CONCURRENCY="2")
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [*COMMAND, "-p", str(free_port())], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert "WEB_CONCURRENCY=2 needs REDIS_URL" in done.stderr


def test_a_concurrency_that_is_no_number_is_refused(tmp_path):
    env = subprocess_env(tmp_path, WEB_CONCURRENCY="many", REDIS_URL="redis://127.0.0.1:6379/0")
    done = subprocess.run(
        [*COMMAND, "-p", str(free_port())], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "WEB_CONCURRENCY must be a whole number" in done.stderr


@pytest.fixture(params=["shared", "reuseport"])
def two_processes(request, tmp_path, organization, upstream):  # noqa: F811
    if not settings.REDIS_URL:
        pytest.skip("several server processes share their state through Redis; set REDIS_URL")
    add_provider_key(organization, upstream, secret="sk-upstream-processes")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    port = free_port()
    log = open(tmp_path / "supervisor.log", "w+b")
    spool = tmp_path / "spool"  # no ingest: each process's spool file stays, named by its pid
    env = subprocess_env(
        tmp_path, WEB_CONCURRENCY="2", GATEWAY_SERVER_SOCKET=request.param, GATEWAY_OUTBOX_DIR=str(spool)
    )
    supervisor = subprocess.Popen(
        [*COMMAND, "-b", "127.0.0.1", "-p", str(port), "gateway_project.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", supervisor, log)
        if request.param == "reuseport":
            # The first process to load answers /healthz; the other listens once its own application
            # is loaded (a loaded machine takes seconds more), and only then does the kernel share
            # connections with it.
            assert until(lambda: listening_sockets(port) == 2, 60), log.read()
        yield f"http://127.0.0.1:{port}", supervisor, request.param, spool
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            for child in children_of(supervisor.pid):
                os.kill(child, signal.SIGKILL)
            supervisor.wait()
        log.close()


def listening_sockets(port: int) -> int:
    """How many sockets listen on ``port`` of 127.0.0.1 (the kernel's table: state 0A is LISTEN)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    local = f"0100007F:{port:04X}"
    return sum(1 for row in rows if row.split()[1] == local and row.split()[3] == "0A")


async def burst(base_url: str, secret: str, count: int) -> list[int]:
    """``count`` requests at once, each on a new connection: spread over the processes."""
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    f"{base_url}/v1/chat/completions",
                    json=CHAT,
                    headers={"Authorization": f"Bearer {secret}"},
                )
                for _ in range(count)
            )
        )
    return [answer.status_code for answer in answers]


def test_two_processes_serve_one_port_and_hold_limits_and_revocations_together(two_processes, organization):
    base_url, supervisor, mode, spool = two_processes
    assert len(children_of(supervisor.pid)) == 2

    api_key, secret = create_api_key(organization)
    limits_set(organization=organization, api_key=api_key, rate_limits={"rpm": 30, "tpm": None})
    statuses = asyncio.run(burst(base_url, secret, 60))
    assert sorted(statuses) == [200] * 30 + [429] * 30  # exactly the limit, over both processes

    revoked_key, revoked = create_api_key(organization)
    assert set(asyncio.run(burst(base_url, revoked, 10))) == {200}
    key_services.api_key_revoke(api_key=revoked_key)
    assert set(asyncio.run(burst(base_url, revoked, 20))) == {401}  # every process, at once

    if mode == "reuseport":  # 90 connections spread by their hash: both processes served
        writers = {path.name.split("-")[0] for path in spool.iterdir() if ".spool" in path.name}
        assert writers == {str(pid) for pid in children_of(supervisor.pid)}

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0
    assert children_of(supervisor.pid) == []


def test_a_process_that_dies_is_started_again_and_all_die_with_the_supervisor(two_processes, organization):
    base_url, supervisor, _, _ = two_processes
    first, _ = children_of(supervisor.pid)
    os.kill(first, signal.SIGKILL)
    assert until(
        lambda: len(children_of(supervisor.pid)) == 2 and first not in children_of(supervisor.pid), 30
    )
    _, secret = create_api_key(organization)
    assert until(lambda: set(asyncio.run(burst(base_url, secret, 4))) == {200}, 30)

    survivors = children_of(supervisor.pid)
    supervisor.kill()  # SIGKILL: no chance to pass anything on
    supervisor.wait()
    assert until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in survivors), 30)


def test_a_port_someone_listens_on_is_refused(tmp_path):
    if not settings.REDIS_URL:
        pytest.skip("several server processes need REDIS_URL")
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        env = subprocess_env(tmp_path, WEB_CONCURRENCY="2")
        done = subprocess.run(
            [*COMMAND, "-p", str(port)], env=env, capture_output=True, text=True, timeout=30
        )
    finally:
        taken.close()
    assert done.returncode == 1 and f"Cannot listen on 127.0.0.1:{port}" in done.stderr


def test_access_lines_are_written_in_whole_lines_of_at_most_a_pipes_atomic_write():
    lines = [f"127.0.0.1 - - line {n} {'x' * 90}\n" for n in range(200)] + ["long " + "y" * 5000 + "\n"]
    chunks = list(access_log._chunks(lines))
    assert "".join(chunks) == "".join(lines)
    assert all(chunk.endswith("\n") for chunk in chunks)
    assert all(len(chunk.encode()) <= access_log.CHUNK_BYTES for chunk in chunks[:-1])
    assert chunks[-1] == lines[-1]  # longer than a chunk: alone


def test_make_run_with_two_processes_serves_and_stops_every_one(tmp_path, organization, upstream):  # noqa: F811
    if not settings.REDIS_URL:
        pytest.skip("several server processes share their state through Redis; set REDIS_URL")
    add_provider_key(organization, upstream, secret="sk-upstream-make-run")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    with Gateway(tmp_path, WEB_CONCURRENCY="2") as gateway:
        assert set(asyncio.run(burst(gateway.base_url, secret, 10))) == {200}
        assert gateway.stop() == 0
        assert not session_alive(gateway.process.pid)  # the supervisor, both servers, the worker
    assert "2 server processes on 127.0.0.1" in gateway.output()
