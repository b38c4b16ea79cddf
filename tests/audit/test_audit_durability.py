"""No audit entry is lost when the database goes away for part of a run: thousands of requests at
concurrency through a live gateway, the database cut for a while in the middle (a TCP proxy in front
of PostgreSQL), and every request id is in the audit log afterwards."""

import asyncio

import httpx
import pytest
from django.db import connection

from apps.audit.models import AuditEntry
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import daphne_server
from tests.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="cuts a PostgreSQL connection; run with DATABASE_URL"
    ),
]

REQUESTS = 3000
CONCURRENCY = 32


def database_url_through(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@127.0.0.1:{proxy.port}/{db['NAME']}"


async def drive(base_url: str, secret: str, on_progress) -> list[str]:
    request_ids: list[str] = []
    sent = 0
    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal sent
            while sent < REQUESTS:
                sent += 1
                await on_progress(sent)
                response = await client.post(
                    "/v1/chat/completions",
                    json={"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"Authorization": f"Bearer {secret}"},
                )
                assert response.status_code == 200, response.text
                request_ids.append(response.headers["x-gateway-request-id"])

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return request_ids


def count_entries() -> int:
    """Counted straight from PostgreSQL (not through the cut), on a thread's own connection."""
    try:
        return AuditEntry.objects.count()
    finally:
        connection.close()


def test_every_request_is_in_the_audit_log_after_a_database_outage(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    db = connection.settings_dict

    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        env = {"DATABASE_URL": database_url_through(cut), "GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}
        with daphne_server(tmp_path, **env) as base_url:
            counts = {}

            async def on_progress(sent: int) -> None:
                if sent == REQUESTS // 3:
                    await asyncio.to_thread(cut.sever)
                    counts["at_cut"] = await asyncio.to_thread(count_entries)
                elif sent == 2 * REQUESTS // 3:
                    counts["before_restore"] = await asyncio.to_thread(count_entries)
                    cut.restore()

            request_ids = asyncio.run(drive(base_url, secret, on_progress))
        # Leaving daphne_server sends SIGTERM: the gateway drains its outbox before it exits.

    assert len(request_ids) == REQUESTS
    # The outage was real: nothing reached the database while it was cut ...
    assert counts["before_restore"] - counts["at_cut"] < CONCURRENCY * 2
    log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("daphne-*.log"))
    assert "Outbox: delivering" in log  # the writer met the outage, and spooled
    assert "replayed spool file" in log
    # ... and yet every request is there, exactly once.
    stored = set(map(str, AuditEntry.objects.filter(organization=organization).values_list("id", flat=True)))
    assert stored == set(request_ids)
