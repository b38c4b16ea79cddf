"""An export that fails after its headers went out (issue 8, High #2), against a live Daphne on
PostgreSQL with psycopg's pool: the response ends with an error marker instead of hanging, the
error is logged without secrets, and the database connection goes back to the pool. Fifty such
exports, and the gateway still answers its management API, its proxy and a complete export.

The failure is one no validation can prevent: another session holds a lock on the audit log's
table (a migration, a ``VACUUM FULL``), and the gateway's statements give up after PostgreSQL's
``lock_timeout``. The export's query meets it after the header block was sent.
"""

import asyncio
import json
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.db import connection, transaction

from apps.audit.models import AuditEntry
from tests import servers
from tests.audit.entries import AuditEntryFactory, bulk_entries
from tests.factories import PASSWORD
from tests.proxy.conftest import add_alias, add_provider_key

pytestmark = pytest.mark.django_db(transaction=True)

COMPLIANCE = "/api/v1/analytics/compliance/export"
POLICY = "/api/v1/analytics/policy/export"
YEAR = {"from": "2025-01-01", "to": "2026-01-01"}
POOL_SIZE = 3
FAILING_EXPORTS = 50
PROVIDER_SECRET = "sk-upstream-export-failures-0001"


@pytest.fixture
def owner(owner):
    """The owner, with a password the live server's real settings can check."""
    owner.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    owner.user.save(update_fields=["password"])
    return owner


@pytest.fixture
def gateway(tmp_path, owner, upstream):
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL: these tests are about psycopg's connection pool (SQLite has none), "
            "and the failure is forced with PostgreSQL's lock_timeout"
        )
    organization = owner.organization
    add_provider_key(organization, upstream, secret=PROVIDER_SECRET)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    AuditEntryFactory(organization=organization, policy_decisions=[{"policy": "pii", "action": "redacted"}])
    database_url = servers.test_database_url() + "?" + urlencode({"options": "-c lock_timeout=200"})
    with servers.daphne_server(
        tmp_path, DATABASE_URL=database_url, DATABASE_POOL="true", DATABASE_POOL_SIZE=str(POOL_SIZE)
    ) as base_url:
        yield base_url


@contextmanager
def audit_log_locked():
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {AuditEntry._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        yield


def sign_in(base_url: str, email: str) -> tuple[str, dict[str, str]]:
    response = httpx.post(f"{base_url}/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    token = response.json()["access"]
    return token, {"Authorization": f"Bearer {token}"}


async def export_many(base_url: str, session: dict[str, str], params: list[dict]) -> list:
    """Each export (five at a time); a response that never ends is a ReadTimeout in the list."""
    limit = asyncio.Semaphore(5)
    async with httpx.AsyncClient(base_url=base_url, headers=session, timeout=15) as client:

        async def one(index: int, query: dict):
            async with limit:
                return await client.get((COMPLIANCE, POLICY)[index % 2], params=query)

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(params)), return_exceptions=True)


def test_fifty_exports_that_fail_midway_end_cleanly_and_the_gateway_still_answers(gateway, owner, tmp_path):
    token, session = sign_in(gateway, owner.user.email)
    created = httpx.post(f"{gateway}/api/v1/api-keys", json={"name": "after"}, headers=session)
    assert created.status_code == 201, created.text
    api_key = created.json()["key"]
    formats = [{**YEAR, "export_format": ("csv", "jsonl")[i // 2 % 2]} for i in range(FAILING_EXPORTS)]

    with audit_log_locked():
        failed = asyncio.run(export_many(gateway, session, formats))
        # What the validation catches never reaches the database: a 400 before streaming.
        refused = asyncio.run(export_many(gateway, session, [{**YEAR, "policy": "\x00x"}] * 10))

    # Every pooled connection came back: the management API, the proxy and an export all answer.
    for _ in range(POOL_SIZE * 3):
        assert httpx.get(f"{gateway}/api/v1/api-keys", headers=session).status_code == 200
    completion = httpx.post(
        f"{gateway}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert completion.status_code == 200, completion.text
    complete = httpx.get(f"{gateway}{POLICY}", params={**YEAR, "export_format": "jsonl"}, headers=session)
    assert complete.status_code == 200
    assert json.loads(complete.text.splitlines()[-1]) == {"type": "export_end", "rows": 2}

    for response, query in zip(failed, formats, strict=True):
        assert isinstance(response, httpx.Response), f"the export never ended: {response!r}"
        assert response.status_code == 200  # the headers went out before the failure
        last_line = response.text.splitlines()[-1]
        if query["export_format"] == "jsonl":
            assert json.loads(last_line)["type"] == "export_error"
            assert "export_end" not in response.text
        else:
            assert last_line == "# export incomplete: a server error stopped it after 0 rows"
            assert "end of export" not in response.text
    for response in refused:
        assert isinstance(response, httpx.Response), response
        assert response.status_code == 400
        assert response.json()["error"]["fields"].keys() == {"policy"}

    [log] = tmp_path.glob("daphne-*.log")
    server_log = log.read_text()
    assert server_log.count("export of organization") == FAILING_EXPORTS
    for secret in (token, api_key, PROVIDER_SECRET, "\x00x"):
        assert secret not in server_log


def test_exports_the_client_abandons_midway_give_their_connections_back(gateway, owner, tmp_path):
    """A client that drops the download cancels the export between two database chunks: its
    server-side cursor is closed and its connection returned, and nothing is logged as an error."""
    bulk_entries(
        owner.organization, [datetime(2025, 3, 1, tzinfo=UTC) + timedelta(seconds=s) for s in range(6000)]
    )
    _, session = sign_in(gateway, owner.user.email)

    for _ in range(POOL_SIZE * 4):
        with httpx.stream(
            "GET", f"{gateway}{COMPLIANCE}", params=YEAR, headers=session, timeout=15
        ) as response:
            assert response.status_code == 200
            next(response.iter_bytes())  # the header block, then the client goes away

    for _ in range(POOL_SIZE * 3):
        assert httpx.get(f"{gateway}/api/v1/api-keys", headers=session, timeout=10).status_code == 200
    complete = httpx.get(
        f"{gateway}{COMPLIANCE}", params={**YEAR, "export_format": "jsonl"}, headers=session, timeout=30
    )
    assert json.loads(complete.text.splitlines()[-1]) == {"type": "export_end", "rows": 6001}
    [log] = tmp_path.glob("daphne-*.log")
    assert " ERROR " not in log.read_text()
