"""The ingest after a PostgreSQL outage (issue 20, section 2): it writes again within a few seconds of
the database coming back, and nothing spooled meanwhile is lost or written twice.

psycopg's pool retried a failed connect with a doubling pause (1, 2, 4, 8, 16 s ...) for five
minutes: after a 67 s outage the outside run's ingest waited 55 s for the next attempt. Here the
outage is 8 s from the ingest's first failure, which before the fix put the pool's next attempt 6 to
9 s after the database was back.

Production layout: Daphne (its own, uncut database connection) spools; ``manage.py outbox_ingest``
reaches PostgreSQL through a loopback TCP proxy the test severs, with the pool on as in production."""

import asyncio
import sys
import time

import httpx
import pytest
from django.db import connection

from tests.audit.test_audit_durability import counted_once, start, start_daphne, stop, stored_ids, wait_for
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key, bearer
from tests.tcp_proxy import TcpProxy
from tests.upstreams import upstream as loopback_upstream

upstream = loopback_upstream  # the loopback provider, a fixture of this module
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="cuts a PostgreSQL connection"),
]

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
OUTAGE_SECONDS = 8.0


def database_url_through(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@127.0.0.1:{proxy.port}/{db['NAME']}"


def send(base_url: str, secret: str, count: int) -> list[str]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            return await asyncio.gather(
                *(
                    client.post("/v1/chat/completions", json=CHAT, headers=bearer(secret))
                    for _ in range(count)
                )
            )

    responses = asyncio.run(run())
    assert all(response.status_code == 200 for response in responses)
    return [response.headers["x-gateway-request-id"] for response in responses]


def wait_for_log(path, text: str, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} not in {path.name} within {timeout} s"
        time.sleep(0.05)
    return time.monotonic()


def test_the_ingest_resumes_within_seconds_of_the_database_coming_back(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    db = connection.settings_dict
    outbox = {"GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}

    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        daphne, base_url = start_daphne(tmp_path, outbox)
        ingest_env = {**outbox, "DATABASE_URL": database_url_through(cut), "DATABASE_POOL": "true"}
        command = [sys.executable, "manage.py", "outbox_ingest", "--interval", "0.05"]
        ingest = start(tmp_path, "ingest", command, ingest_env)
        try:
            before = send(base_url, secret, 4)
            assert wait_for(set(before), timeout=15) >= set(before)

            cut.sever()
            during = send(base_url, secret, 20)
            failed_at = wait_for_log(tmp_path / "ingest.log", "Outbox: writing", timeout=10)
            # The outage itself: long enough for the pool's doubling pauses to have grown.
            time.sleep(max(0.0, failed_at + OUTAGE_SECONDS - time.monotonic()))
            assert not set(during) & stored_ids()

            cut.restore()
            restored_at = time.monotonic()
            stored = wait_for(set(during), timeout=30)
            resumed_after = time.monotonic() - restored_at
        finally:
            stop(daphne, ingest)

    assert stored >= set(before) | set(during)  # nothing lost ...
    assert counted_once(organization)  # ... nor written twice
    assert resumed_after < 3.5, f"the ingest wrote again {resumed_after:.1f} s after the database was back"
