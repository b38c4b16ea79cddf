"""The live tail: the page (latest requests, without JavaScript), the WebSocket (the console's session,
its organization only) and the publishing of each finished request, off the request."""

import asyncio
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.audit.tail import MESSAGE_TYPE, TailPublisher, publisher, tail_group
from apps.console import consumers
from apps.console.access import SESSION_ORGANIZATION
from apps.organizations.models import Membership
from gateway_project.asgi import application
from tests.audit.entries import AuditEntryFactory
from tests.factories import MembershipFactory, TeamFactory
from tests.proxy.conftest import (  # noqa: F401 (the proxy's fixtures: a real request through it)
    _fresh_routing_state,
    bearer,
    gateway_key,
    proxy,
    routed,
    upstream,
)

ORIGIN = (b"origin", b"http://127.0.0.1")
SUMMARY_FIELDS = {
    "log_id",
    "created_at",
    "endpoint",
    "team_id",
    "team_name",
    "api_key_id",
    "api_key_name",
    "api_key_prefix",
    "requested_model",
    "model",
    "provider",
    "stream",
    "status",
    "error_type",
    "error_code",
    "cache",
    "policy_action",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_ms",
    "ttft_ms",
}


def signed_in(organization, role: str = "member", *, user=None) -> tuple[str, Membership]:
    """A console session of a new member of ``organization`` (or of ``user``): its cookie's value."""
    membership = MembershipFactory(organization=organization, role=role, **({"user": user} if user else {}))
    client = Client()
    client.force_login(membership.user)
    return client.cookies["sessionid"].value, membership


async def socket(
    session: str | None,
    query: str = "",
    *,
    origin=ORIGIN,
    host: bytes = b"127.0.0.1",
    scheme: str = "ws",
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> WebsocketCommunicator:
    headers = [(b"host", host), *extra]
    if origin is not None:
        headers.append(origin)
    if session is not None:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    communicator = WebsocketCommunicator(application, f"/console/tail/ws{query}", headers=headers)
    communicator.scope["scheme"] = scheme  # the application reads the scope once connecting
    return communicator


async def opened(session: str, query: str = "") -> WebsocketCommunicator:
    communicator = await socket(session, query)
    connected, _ = await communicator.connect()
    assert connected
    assert (await communicator.receive_json_from())["type"] == "hello"
    return communicator


# --- The page -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_page_lists_the_latest_requests_without_javascript(console_for, organization, outsider):
    now = datetime.now(UTC)
    team = TeamFactory(organization=organization, name="Search")
    ours = [
        AuditEntryFactory(organization=organization, created_at=now - timedelta(minutes=n)) for n in range(3)
    ]
    ours[0].team_id = team.id
    ours[0].save()
    theirs = AuditEntryFactory(
        organization=outsider.organization, created_at=now, requested_model="theirs-only"
    )

    response = console_for(organization, "member").get("/console/tail/")

    assert response.status_code == 200
    page = response.content.decode()
    assert re.findall(r'data-log-id="([0-9a-f-]{36})"', page) == [str(e.id) for e in ours]
    assert str(theirs.id) not in page and "theirs-only" not in page
    assert "Search" in page and "secret prompt" not in page
    assert "Live updates need JavaScript" in page
    assert f'data-websocket="/console/tail/ws?organization={organization.id}"' in page
    assert "/static/console/tail.js" in page


def test_a_visitor_without_a_session_is_sent_to_the_sign_in_page(client, db):
    response = client.get("/console/tail/")
    assert response.status_code == 302 and response["Location"].startswith("/console/login/")


# --- The WebSocket --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_connection_without_a_session_is_closed():
    communicator = await socket(None)
    assert await communicator.connect() == (False, consumers.NOT_SIGNED_IN)

    forged = await socket("not-a-session-key")
    assert await forged.connect() == (False, consumers.NOT_SIGNED_IN)


@pytest.mark.django_db(transaction=True)
async def test_a_connection_from_another_sites_page_is_refused(organization):
    session, _ = await database_sync_to_async(signed_in)(organization)
    for origin in ((b"origin", b"https://evil.example"), None):
        communicator = await socket(session, origin=origin)
        connected, _ = await communicator.connect()
        assert not connected


async def accepted(session: str, origin: bytes, **options) -> bool:
    communicator = await socket(session, origin=(b"origin", origin), **options)
    connected, _ = await communicator.connect()
    await communicator.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "origin",
    [
        pytest.param((b"origin", b"http://127.0.0.1:9999"), id="another-port"),
        pytest.param((b"origin", b"https://127.0.0.1"), id="another-scheme"),
        pytest.param((b"origin", b"http://localhost"), id="another-allowed-host"),
        pytest.param((b"origin", b"null"), id="opaque"),
        pytest.param(None, id="missing"),
    ],
)
async def test_a_page_of_another_origin_on_the_same_machine_cannot_open_the_tail(organization, origin):
    """Another program on the gateway's machine (another port), a plain-HTTP page of an HTTPS console:
    the browser sends the session cookie with the handshake, so only the whole origin tells them apart."""
    session, _ = await database_sync_to_async(signed_in)(organization)
    assert await accepted(session, b"http://127.0.0.1")  # the console's own page

    communicator = await socket(session, origin=origin)
    connected, _ = await communicator.connect()

    assert not connected


@pytest.mark.django_db(transaction=True)
async def test_the_consoles_own_origin_is_its_host_with_its_port(organization):
    session, _ = await database_sync_to_async(signed_in)(organization)

    assert await accepted(session, b"http://127.0.0.1:8000", host=b"127.0.0.1:8000")
    assert not await accepted(session, b"http://127.0.0.1", host=b"127.0.0.1:8000")
    # A host the gateway does not serve is not an origin of its own, whatever the page says.
    assert not await accepted(session, b"http://gateway.invalid", host=b"gateway.invalid")


@pytest.mark.django_db(transaction=True)
async def test_behind_tls_only_the_https_origin_opens_the_tail(organization, settings):
    session, _ = await database_sync_to_async(signed_in)(organization)
    # TLS at the gateway itself: the handshake is wss.
    assert await accepted(session, b"https://127.0.0.1", scheme="wss")
    assert not await accepted(session, b"http://127.0.0.1", scheme="wss")

    # TLS at a balancer that says so (TRUST_X_FORWARDED_PROTO, on with GATEWAY_HTTPS).
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = ((b"x-forwarded-proto", b"https"),)
    assert await accepted(session, b"https://127.0.0.1", extra=forwarded)
    assert not await accepted(session, b"http://127.0.0.1", extra=forwarded)


@pytest.mark.django_db(transaction=True)
async def test_the_origins_in_csrf_trusted_origins_may_open_the_tail(organization, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.gateway.test", "https://*.corp.test"]
    session, _ = await database_sync_to_async(signed_in)(organization)

    assert await accepted(session, b"https://console.gateway.test")
    assert await accepted(session, b"https://eu.corp.test")
    assert not await accepted(session, b"http://console.gateway.test")
    assert not await accepted(session, b"https://console.gateway.test:8443")
    assert not await accepted(session, b"https://corp.test.evil.test")


@pytest.mark.django_db(transaction=True)
async def test_asking_for_another_organizations_tail_is_closed(organization, outsider):
    session, membership = await database_sync_to_async(signed_in)(organization)
    for asked in (outsider.organization.id, uuid.uuid4(), "not-an-id"):
        communicator = await socket(session, f"?organization={asked}")
        assert await communicator.connect() == (False, consumers.FORBIDDEN)

    # A member of both organizations watches the one the console session works in, not the other.
    await database_sync_to_async(MembershipFactory)(
        organization=outsider.organization, user=membership.user, role="owner"
    )
    communicator = await socket(session, f"?organization={outsider.organization.id}")
    assert await communicator.connect() == (False, consumers.FORBIDDEN)
    mine = await opened(session, f"?organization={organization.id}")
    await mine.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_tail_follows_the_organization_the_session_switched_to(organization, outsider):
    session, membership = await database_sync_to_async(signed_in)(organization)
    await database_sync_to_async(MembershipFactory)(
        organization=outsider.organization, user=membership.user, role="member"
    )

    def switch():
        from django.contrib.sessions.backends.db import SessionStore

        store = SessionStore(session_key=session)
        store[SESSION_ORGANIZATION] = str(outsider.organization.id)
        store.save()

    await database_sync_to_async(switch)()
    communicator = await socket(session)
    connected, _ = await communicator.connect()
    assert connected
    assert await communicator.receive_json_from() == {
        "type": "hello",
        "organization": str(outsider.organization.id),
    }
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_member_removed_from_the_organization_stops_receiving(organization, monkeypatch):
    session, membership = await database_sync_to_async(signed_in)(organization)
    communicator = await opened(session)
    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.0)
    await database_sync_to_async(Membership.objects.filter(pk=membership.pk).delete)()

    await get_channel_layer().group_send(tail_group(organization.id), {"type": MESSAGE_TYPE, "requests": []})

    assert (await communicator.receive_output(timeout=1))["type"] == "websocket.close"


@pytest.mark.django_db(transaction=True)
async def test_a_signed_out_session_stops_receiving(organization, monkeypatch):
    session, _ = await database_sync_to_async(signed_in)(organization)
    communicator = await opened(session)
    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.0)

    def sign_out():
        from django.contrib.sessions.backends.db import SessionStore

        SessionStore(session_key=session).delete()

    await database_sync_to_async(sign_out)()
    await get_channel_layer().group_send(tail_group(organization.id), {"type": MESSAGE_TYPE, "requests": []})

    assert (await communicator.receive_output(timeout=1))["type"] == "websocket.close"


@pytest.mark.django_db(transaction=True)
async def test_a_session_whose_password_changed_stops_receiving(organization, monkeypatch):
    session, membership = await database_sync_to_async(signed_in)(organization)
    communicator = await opened(session)
    monkeypatch.setattr(consumers, "RECHECK_SECONDS", 0.0)

    def change_password():
        membership.user.set_password("another-long-password")
        membership.user.save()

    await database_sync_to_async(change_password)()
    await get_channel_layer().group_send(tail_group(organization.id), {"type": MESSAGE_TYPE, "requests": []})

    assert (await communicator.receive_output(timeout=1))["type"] == "websocket.close"


@pytest.mark.django_db(transaction=True)
async def test_another_websocket_path_is_refused(organization):
    session, _ = await database_sync_to_async(signed_in)(organization)
    communicator = WebsocketCommunicator(
        application,
        "/console/other/ws",
        headers=[(b"host", b"127.0.0.1"), ORIGIN, (b"cookie", f"sessionid={session}".encode())],
    )
    assert await communicator.connect() == (False, consumers.NOT_FOUND)


# --- A real request through the proxy -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_request_through_the_proxy_reaches_its_organizations_tail_and_no_other(
    organization,
    outsider,
    routed,  # noqa: F811 (the proxy's fixtures, imported above)
    gateway_key,  # noqa: F811
    proxy,  # noqa: F811
):
    team = await database_sync_to_async(TeamFactory)(organization=organization, name="Checkout")
    ours_session, _ = await database_sync_to_async(signed_in)(organization, "member")
    theirs_session, _ = await database_sync_to_async(signed_in)(outsider.organization, "owner")
    ours, theirs = await opened(ours_session), await opened(theirs_session)

    response = await proxy.post(
        "/v1/chat/completions",
        headers={**bearer(gateway_key[1]), "x-gateway-team": str(team.id)},
        json={"model": "fast", "messages": [{"role": "user", "content": "my card is 4111 1111 1111 1111"}]},
    )
    assert response.status_code == 200

    message = await ours.receive_json_from(timeout=5)
    assert message["type"] == "request"
    assert message["log_id"] == response.headers["x-gateway-request-id"]
    assert set(message) == SUMMARY_FIELDS | {"type"}  # the log list's summary: never a body
    assert "4111" not in str(message)
    assert (message["status"], message["requested_model"], message["provider"]) == (200, "fast", "openai")
    assert (message["team_id"], message["team_name"]) == (str(team.id), "Checkout")
    assert message["api_key_prefix"] == gateway_key[0].key_prefix
    assert message["api_key_name"] == gateway_key[0].name
    assert Decimal(message["cost_usd"]) == Decimal(response.headers["x-gateway-cost-usd"])
    assert message["cache"] == response.headers["x-gateway-cache"]
    assert await theirs.receive_nothing(timeout=0.2)

    await ours.disconnect()
    await theirs.disconnect()


# --- The publisher --------------------------------------------------------------------------------


async def test_a_burst_is_one_message_per_organization_with_its_latest_requests(monkeypatch):
    sent = []

    class Layer:
        async def group_send(self, group, message):
            sent.append((group, message))

    monkeypatch.setattr("apps.audit.tail.get_channel_layer", Layer)
    tail = TailPublisher(interval=0.01, max_per_message=3)
    from apps.audit.records import RequestRecord

    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    for number in range(5):
        for organization_id in (first, second):
            tail.hand_off(
                RequestRecord(
                    request_id=f"{organization_id[:8]}-{number}",
                    started_at=datetime.now(UTC),
                    endpoint="/v1/chat/completions",
                    client_ip="203.0.113.7",
                    user_agent="test",
                    organization_id=organization_id,
                    request_body=b"secret",
                    response_body=b"secret",
                )
            )
    tail.hand_off(RequestRecord("anonymous", datetime.now(UTC), "/v1/models", "", ""))  # no organization
    for _ in range(50):
        if sent:
            break
        await asyncio.sleep(0.01)
    await asyncio.gather(*tail._tasks)

    assert sorted(group for group, _ in sent) == sorted([tail_group(first), tail_group(second)])
    for group, message in sent:
        prefix = group.removeprefix("tail.")[:8]
        assert [request["log_id"] for request in message["requests"]] == [f"{prefix}-{n}" for n in (2, 3, 4)]
        assert "secret" not in str(message)


async def test_with_the_in_memory_layer_only_a_watched_organization_is_published(monkeypatch):
    """The embedded default's layer holds every watcher in this process: an organization nobody
    watches costs no summaries and no message; the one watched gets its requests."""
    from apps.audit.records import RequestRecord

    layer = InMemoryChannelLayer()
    sent = []
    group_send = layer.group_send

    async def spied(group, message):
        sent.append(group)
        await group_send(group, message)

    layer.group_send = spied
    monkeypatch.setattr("apps.audit.tail.get_channel_layer", lambda: layer)
    watched, unwatched = str(uuid.uuid4()), str(uuid.uuid4())
    await layer.group_add(tail_group(watched), "watcher")
    tail = TailPublisher(interval=0.01)
    for organization_id in (watched, unwatched):
        tail.hand_off(
            RequestRecord(
                f"request-{organization_id[:8]}",
                datetime.now(UTC),
                "/v1/models",
                "",
                "",
                organization_id=organization_id,
            )
        )
    for _ in range(50):
        if not tail._pending and not tail._tasks:
            break
        await asyncio.sleep(0.01)
    await asyncio.gather(*tail._tasks)

    assert sent == [tail_group(watched)]
    message = await asyncio.wait_for(layer.receive("watcher"), 1)
    assert [request["log_id"] for request in message["requests"]] == [f"request-{watched[:8]}"]


def test_the_hand_off_does_nothing_without_an_event_loop():
    from apps.audit.records import RequestRecord

    before = len(publisher._pending)
    publisher.hand_off(RequestRecord("x", datetime.now(UTC), "/v1/models", "", "", organization_id="o"))
    assert len(publisher._pending) == before


@pytest.mark.django_db
def test_the_tail_page_takes_no_post(console_for, organization):
    response = console_for(organization, "owner").post("/console/tail/")
    assert response.status_code == 403  # CSRF first; with the token, 405
