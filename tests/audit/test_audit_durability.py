"""No audit entry is lost, whatever happens to the database or to a server process.

- The database goes away for a third of a run (a TCP proxy in front of PostgreSQL is severed):
  thousands of requests at concurrency through a live gateway, and every request id is in the log
  afterwards, exactly once.
- A server process is killed with SIGKILL in the middle of a run (no atexit, no drain): every
  request that got an answer is in the log afterwards, exactly once, written by the ingest from the
  spool file the dead process left open.

Both run the production layout: Daphne spools, ``manage.py outbox_ingest`` writes the database."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from django.db import connection
from django.db.models import Sum

from apps.audit.models import AuditEntry, SpendRollup
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import ROOT, daphne_command, free_port, subprocess_env, wait_until_serving
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="cuts a PostgreSQL connection; run with DATABASE_URL"
)

HELLO = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}


def start(tmp_path, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "w+b")
    return subprocess.Popen(
        command, cwd=ROOT, env=subprocess_env(tmp_path, **env), stdout=log, stderr=subprocess.STDOUT
    )


def start_daphne(tmp_path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    daphne = start(tmp_path, "daphne", daphne_command(port), env)
    base_url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "daphne.log", "rb") as log:
        wait_until_serving(base_url, daphne, log)
    return daphne, base_url


def start_ingest(tmp_path, env: dict[str, str]) -> subprocess.Popen:
    return start(
        tmp_path, "ingest", [sys.executable, "manage.py", "outbox_ingest", "--interval", "0.05"], env
    )


def stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def stored_ids() -> set[str]:
    """Read on a connection of its own, closed again (the caller may be a thread)."""
    try:
        return set(map(str, AuditEntry.objects.values_list("id", flat=True)))
    finally:
        connection.close()


def wait_for(ids: set[str], timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    while True:
        stored = stored_ids()
        if stored >= ids or time.monotonic() > deadline:
            return stored
        time.sleep(0.1)


def counted_once(organization) -> bool:
    """Every entry counted once in the spend roll-ups (no replay counted twice)."""
    entries = AuditEntry.objects.filter(organization=organization).count()
    counted = SpendRollup.objects.filter(organization=organization).aggregate(n=Sum("requests"))["n"]
    return counted == entries


# --- The database cut ------------------------------------------------------------------------------

CUT_REQUESTS = 3000
CUT_CONCURRENCY = 32


def database_url_through(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@127.0.0.1:{proxy.port}/{db['NAME']}"


async def drive_through_the_cut(base_url: str, secret: str, on_progress) -> list[str]:
    request_ids: list[str] = []
    sent = 0
    limits = httpx.Limits(max_connections=CUT_CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal sent
            while sent < CUT_REQUESTS:
                sent += 1
                await on_progress(sent)
                response = await client.post(
                    "/v1/chat/completions",
                    json=HELLO,
                    headers={"Authorization": f"Bearer {secret}"},
                )
                assert response.status_code == 200, response.text
                request_ids.append(response.headers["x-gateway-request-id"])

        await asyncio.gather(*(worker() for _ in range(CUT_CONCURRENCY)))
    return request_ids


@postgresql_only
def test_every_request_is_in_the_audit_log_after_a_database_outage(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    db = connection.settings_dict

    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        env = {"DATABASE_URL": database_url_through(cut), "GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}
        daphne, base_url = start_daphne(tmp_path, env)
        ingest = start_ingest(tmp_path, env)
        try:
            counts = {}

            async def on_progress(sent: int) -> None:
                if sent == CUT_REQUESTS // 3:
                    await asyncio.to_thread(cut.sever)
                    counts["at_cut"] = len(await asyncio.to_thread(stored_ids))
                elif sent == 2 * CUT_REQUESTS // 3:
                    counts["before_restore"] = len(await asyncio.to_thread(stored_ids))
                    cut.restore()

            request_ids = asyncio.run(drive_through_the_cut(base_url, secret, on_progress))
            stored = wait_for(set(request_ids), timeout=30)
        finally:
            stop(daphne, ingest)

    assert len(request_ids) == CUT_REQUESTS
    # The outage was real: nothing reached the database while it was cut ...
    assert counts["before_restore"] - counts["at_cut"] < CUT_CONCURRENCY * 2
    log = (tmp_path / "ingest.log").read_text(errors="replace")
    assert "Outbox: writing" in log  # the ingest met the outage ...
    assert "stays on the spool" in log  # ... and left the files where they were
    # ... and yet every request is there, exactly once.
    assert stored == set(request_ids)
    assert counted_once(organization)


# --- A server process killed ---------------------------------------------------------------------


PATH = "/v1/chat/completions"
KILL_REQUESTS = 600
KILL_CONCURRENCY = 16
KILL_AFTER = 300  # answered requests


async def drive_until_killed(base_url: str, secret: str, daphne: subprocess.Popen) -> list[str]:
    """Sends KILL_REQUESTS at KILL_CONCURRENCY, half of them streamed, and kills Daphne with SIGKILL
    once KILL_AFTER were answered, requests in flight; returns the ids of the requests that got a
    whole answer."""
    answered: list[str] = []
    sent = 0
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:

        async def worker() -> None:
            nonlocal sent
            while sent < KILL_REQUESTS and daphne.poll() is None:
                sent += 1
                stream = sent % 2 == 0  # half are streams: answered once their [DONE] arrived
                body = {**HELLO, "stream": stream}
                headers = {"Authorization": f"Bearer {secret}"}
                try:
                    async with client.stream("POST", PATH, json=body, headers=headers) as response:
                        text = (await response.aread()).decode()
                except httpx.TransportError:
                    return  # the server is gone: this request got no (whole) answer
                assert response.status_code == 200, text
                if stream and not text.rstrip().endswith("data: [DONE]"):
                    return
                answered.append(response.headers["x-gateway-request-id"])
                if len(answered) == KILL_AFTER:
                    os.kill(daphne.pid, signal.SIGKILL)

        await asyncio.gather(*(worker() for _ in range(KILL_CONCURRENCY)))
    return answered


def test_a_server_killed_mid_run_loses_no_answered_request(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    # A long fsync interval: the dead server never sealed its file, the ingest must take it open.
    env = {"GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox"), "GATEWAY_OUTBOX_FSYNC_SECONDS": "60"}
    daphne, base_url = start_daphne(tmp_path, env)
    ingest = start_ingest(tmp_path, env)
    try:
        answered = asyncio.run(drive_until_killed(base_url, secret, daphne))
        assert daphne.wait(5) == -signal.SIGKILL
        stored = wait_for(set(answered), timeout=15)
    finally:
        stop(daphne, ingest)

    assert KILL_AFTER <= len(answered) < KILL_REQUESTS  # killed with requests still to come
    missing = set(answered) - stored
    assert not missing, f"{len(missing)} of {len(answered)} answered requests are not in the audit log"
    assert counted_once(organization)
