"""The audit log's promise is one entry per request whatever the client sent: a value the database
would refuse (an address that is not one, a NUL, a lone surrogate, an over-long string) is made
safe by the audit service, never a reason to lose the entry or its spend."""

import math
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest
from channels.db import database_sync_to_async
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.audit.models import AuditEntry, SpendRollup
from apps.audit.records import Attempt, RequestRecord
from apps.catalog.pricing import Usage
from apps.outbox.outbox import outbox
from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application
from tests.factories import OrganizationFactory
from tests.proxy.conftest import bearer

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


def client_from(address: str) -> httpx.AsyncClient:
    """The gateway as Daphne hands it a request whose client address came from a forwarded header."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application, client=(address, 5000)),
        base_url="http://gateway",
        timeout=30,
    )


def entry_and_requests(request_id: str) -> tuple[AuditEntry, int]:
    assert outbox().flush()
    entry = AuditEntry.objects.get(id=request_id)
    counted = SpendRollup.objects.filter(organization_id=entry.organization_id).aggregate(n=Sum("requests"))
    return entry, counted["n"]


@pytest.mark.parametrize("address", ["not-an-ip", "203.0.113.7, 10.0.0.1", "fe80::1%eth0", "\x00"])
async def test_a_request_from_a_forged_address_is_logged_without_it(routed, gateway_key, address):
    async with client_from(address) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(gateway_key[1])
        )
    await close_sessions()
    assert response.status_code == 200

    entry, counted = await database_sync_to_async(entry_and_requests)(
        response.headers["x-gateway-request-id"]
    )
    assert entry.client_ip in (None, "fe80::1")
    assert entry.cost_usd == Decimal(response.headers["x-gateway-cost-usd"]) > 0
    assert counted == 1  # and its spend reached the roll-ups


async def test_a_model_name_with_a_nul_is_logged_without_the_nul(proxy, routed, gateway_key):
    response = await proxy.post(
        "/v1/chat/completions",
        json={"model": "fast\u0000", "messages": HELLO},
        headers={**bearer(gateway_key[1]), "user-agent": "agent\x00/1"},
    )

    entry, counted = await database_sync_to_async(entry_and_requests)(
        response.headers["x-gateway-request-id"]
    )
    assert entry.requested_model == "fast"
    assert entry.user_agent == "agent/1"
    assert counted == 1


async def test_a_body_with_nuls_and_lone_surrogates_is_logged(proxy, routed, organization, gateway_key):
    from apps.organizations import services as organization_services

    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": "full"}
    )
    content = 'a NUL \\u0000 here, a lone surrogate \\ud800 there, and "x" * 3'
    body = b'{"model": "fast", "messages": [{"role": "user", "content": "' + content.encode() + b'"}]}'

    response = await proxy.post(
        "/v1/chat/completions",
        content=body + b"\x00",
        headers={**bearer(gateway_key[1]), "content-type": "application/json"},
    )

    entry, counted = await database_sync_to_async(entry_and_requests)(
        response.headers["x-gateway-request-id"]
    )
    assert "\x00" not in entry.request_body
    assert "lone surrogate" in entry.request_body
    assert counted == 1


# --- A fuzzed batch through the real outbox and audit writer ---------------------------------------

HOSTILE = [
    "\x00",
    "fast\x00",
    "\ud800",
    "\udfff tail",
    "x\ud83d",  # the first half of an emoji, alone
    "\u202e\ufeff\u200b",
    "e\u0301\U0001f600",
    "'); DROP TABLE audit_auditentry; --",
    "\\u0000",
    "\r\n\t\x7f\x1b[31m",
]

hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=40),
    st.text(alphabet=st.sampled_from(["\x00", "\ud800", "\udc00", "a", "é", "\U0001f600"]), max_size=40),
    st.integers(min_value=201, max_value=20_000).map(lambda n: "\x00y" * n),
)
addresses = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["not-an-ip", "999.1.1.1", "fe80::1%eth0", "1.2.3.4, 5.6.7.8", "[::1]", " 10.0.0.1", ""]),
    hostile_text,
)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(min_value=0, max_value=1e6))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), floats, hostile_text),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(hostile_text, children, max_size=3)
    ),
    max_leaves=8,
)
attempts = st.builds(
    Attempt,
    provider=hostile_text,
    provider_key_id=st.one_of(st.uuids().map(str), hostile_text),
    model=hostile_text,
    alias=st.one_of(st.none(), hostile_text),
    status=st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40)),
    outcome=hostile_text,
    latency_ms=floats,
    error=st.one_of(st.none(), hostile_text),
)
token_counts = st.integers(min_value=-(2**40), max_value=2**40)


@st.composite
def records(draw, organization_id: str) -> RequestRecord:
    return RequestRecord(
        request_id=str(uuid.uuid4()),
        started_at=datetime.now(UTC),
        endpoint=draw(st.one_of(st.just("/v1/chat/completions"), hostile_text)),
        client_ip=draw(addresses),
        user_agent=draw(hostile_text),
        organization_id=organization_id,
        api_key_id=draw(st.one_of(st.none(), st.uuids().map(str), hostile_text)),
        api_key_prefix=draw(st.one_of(st.none(), hostile_text)),
        team_id=draw(st.one_of(st.none(), st.uuids().map(str), hostile_text)),
        requested_model=draw(st.one_of(st.none(), hostile_text)),
        provider=draw(st.one_of(st.none(), hostile_text)),
        provider_key_id=draw(st.one_of(st.none(), st.uuids().map(str), hostile_text)),
        model=draw(st.one_of(st.none(), hostile_text)),
        stream=draw(st.booleans()),
        attempts=draw(st.lists(attempts, max_size=3)),
        cache=draw(st.one_of(st.just("miss"), hostile_text)),
        policy_action=draw(st.one_of(st.none(), hostile_text)),
        policy_reason=draw(st.one_of(st.none(), hostile_text)),
        policy_decisions=draw(st.lists(st.dictionaries(hostile_text, json_values, max_size=3), max_size=2)),
        status=draw(st.integers(min_value=-(2**20), max_value=2**20)),
        error_type=draw(st.one_of(st.none(), hostile_text)),
        error_code=draw(st.one_of(st.none(), hostile_text)),
        usage=draw(
            st.one_of(
                st.none(),
                st.builds(
                    Usage,
                    input_tokens=token_counts,
                    output_tokens=token_counts,
                    cached_input_tokens=token_counts,
                    reasoning_tokens=token_counts,
                    estimated=st.booleans(),
                ),
            )
        ),
        cost_usd=draw(
            st.one_of(
                st.decimals(min_value=0, max_value=1, places=12),
                st.decimals(allow_nan=True, allow_infinity=True),
            )
        ),
        latency_ms=draw(floats),
        ttft_ms=draw(st.one_of(st.none(), floats)),
        upstream_ms=draw(floats),
        stream_completed=draw(st.one_of(st.none(), st.booleans())),
        client_disconnected=draw(st.booleans()),
        log_bodies=draw(st.sampled_from(["full", "redacted", "metadata"])),
        request_body=draw(
            st.one_of(st.binary(max_size=200), hostile_text.map(lambda t: t.encode("utf-8", "surrogatepass")))
        ),
        response_body=draw(st.binary(max_size=200)),
    )


def requests_counted(organization_id: str) -> int:
    return SpendRollup.objects.filter(organization_id=organization_id).aggregate(n=Sum("requests"))["n"] or 0


def cost_counted(organization_id: str) -> Decimal:
    rollups = SpendRollup.objects.filter(organization_id=organization_id)
    return rollups.aggregate(cost=Sum("cost_usd"))["cost"] or Decimal(0)


def test_every_fuzzed_request_leaves_exactly_one_entry_and_is_counted_in_the_rollups():
    writer = outbox()
    organizations = st.builds(lambda: str(OrganizationFactory().id))

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data) -> None:
        organization_id = data.draw(organizations)  # its own, so the roll-ups hold only this batch
        batch = data.draw(st.lists(records(organization_id), min_size=1, max_size=12))
        dead_before = writer.dead_lettered
        for record in batch:
            writer.put("audit", record)
        assert writer.flush()

        entries = AuditEntry.objects.filter(id__in=[record.request_id for record in batch])
        assert entries.count() == len(batch)
        assert writer.dead_lettered == dead_before
        assert requests_counted(organization_id) == len(batch)
        written = entries.aggregate(cost=Sum("cost_usd"))["cost"]
        # SQLite sums decimals as floats: equal on PostgreSQL, within rounding on SQLite.
        assert float(cost_counted(organization_id)) == pytest.approx(float(written), rel=1e-12, abs=1e-7)
        for entry in entries:
            assert entry.client_ip is None or entry.client_ip.strip() == entry.client_ip
            assert math.isfinite(entry.latency_ms)

    check()
