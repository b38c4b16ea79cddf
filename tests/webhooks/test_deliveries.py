"""Deliveries to a real HTTPS receiver on loopback: signed, recorded attempt by attempt, retried on
the 5-minute schedule at most three times, retried by hand, listed, and sent only to a checked
address. Events come in as the gateway raises them: through the outbox and its ingest."""

import contextlib
import json
import logging
import socket
import time
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.events.models import Event
from apps.events.publish import raise_event
from apps.outbox.outbox import outbox
from apps.webhooks import services
from apps.webhooks.models import WebhookDelivery
from apps.webhooks.transport import READ_TIMEOUT
from gateway_project.celery import app as celery_app
from tests.metrics import metric_value
from tests.webhooks.conftest import DELIVERIES, WEBHOOKS, create_webhook, verify_signature

# The ingest writes from a thread of its own, on its own connection, and the delivery tasks run when
# its transaction commits.
pytestmark = pytest.mark.django_db(transaction=True)


def raise_and_ingest(organization, event_type: str = "budget.exceeded", data: dict | None = None) -> str:
    event_id = raise_event(organization.id, event_type, data if data is not None else {"budget": "team"})
    assert outbox().flush()
    return event_id


def attempts(event_id) -> list[WebhookDelivery]:
    return list(WebhookDelivery.objects.filter(event_id=event_id).order_by("attempt"))


def test_a_raised_event_arrives_signed_with_the_documented_payload_and_headers(
    session_client, organization, receiver
):
    webhook = create_webhook(session_client, receiver.url(), events=["budget.exceeded"])

    event_id = raise_and_ingest(organization, data={"budget": "team", "spent_usd": "12.50000000"})

    [received] = receiver.received
    assert received.path == "/hook"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["x-gateway-event"] == "budget.exceeded"
    payload = json.loads(received.body)
    event = Event.objects.get(id=event_id)
    assert payload == {
        "id": event_id,
        "type": "budget.exceeded",
        "created_at": payload["created_at"],
        "organization_id": str(organization.id),
        "data": {"budget": "team", "spent_usd": "12.50000000"},
    }
    assert datetime.fromisoformat(payload["created_at"]) == event.created_at
    assert payload["created_at"].endswith("Z")
    signature = received.headers["x-gateway-signature"]
    assert signature.count("v1=") == 1
    assert verify_signature(webhook["secret"], signature, received.body)
    assert not verify_signature(webhook["secret"], signature, received.body + b" ")
    assert not verify_signature("whsec_someone-else", signature, received.body)
    [delivery] = attempts(event_id)
    assert received.headers["x-gateway-delivery"] == str(delivery.id)
    assert delivery.status == "succeeded" and delivery.attempt == 1
    assert delivery.response_status == 200 and delivery.duration_ms is not None
    assert delivery.next_attempt_at is None and delivery.error == "" and delivery.failure_reason == ""


def test_only_active_webhooks_subscribed_to_the_kind_get_it(
    session_client, organization, outsider, receiver, client_for
):
    create_webhook(session_client, receiver.url(path="/all"), events=["*"])
    create_webhook(session_client, receiver.url(path="/policy"), events=["policy.blocked"])
    create_webhook(session_client, receiver.url(path="/budget"), events=["budget.exceeded"])
    create_webhook(session_client, receiver.url(path="/off"), is_active=False)
    create_webhook(client_for(outsider.organization, "owner"), receiver.url(path="/outsider"))

    raise_and_ingest(organization, "budget.exceeded")

    assert sorted(received.path for received in receiver.received) == ["/all", "/budget"]


def test_an_event_written_twice_is_delivered_once(session_client, organization, receiver):
    from apps.events.services import events_write

    create_webhook(session_client, receiver.url())
    event_id = raise_and_ingest(organization)
    payload = {
        "v": 1,
        "id": event_id,
        "type": "budget.exceeded",
        "organization_id": str(organization.id),
        "created_at": "2026-11-25T10:00:00Z",
        "data": {},
    }

    events_write([payload, payload])  # as after a crash between the insert and the spool's removal

    assert len(receiver.received) == 1
    assert len(attempts(event_id)) == 1


def test_while_a_secret_is_rolled_both_secrets_sign_until_the_overlap_ends(
    session_client, organization, receiver
):
    webhook = create_webhook(session_client, receiver.url())
    new_secret = session_client.post(f"{WEBHOOKS}/{webhook['id']}/roll-secret").json()["secret"]

    raise_and_ingest(organization)

    received = receiver.received[-1]
    header = received.headers["x-gateway-signature"]
    assert header.count("v1=") == 2
    assert verify_signature(webhook["secret"], header, received.body)
    assert verify_signature(new_secret, header, received.body)

    with time_machine.travel(datetime.now(UTC) + services.SECRET_OVERLAP + timedelta(minutes=1), tick=True):
        raise_and_ingest(organization)
        received = receiver.received[-1]
        header = received.headers["x-gateway-signature"]
        assert header.count("v1=") == 1
        assert verify_signature(new_secret, header, received.body)
        assert not verify_signature(webhook["secret"], header, received.body)


def test_the_test_action_sends_a_signed_webhook_test_event_to_that_webhook_alone(session_client, receiver):
    webhook = create_webhook(session_client, receiver.url(path="/tested"), events=["policy.blocked"])
    create_webhook(session_client, receiver.url(path="/other"))

    response = session_client.post(f"{WEBHOOKS}/{webhook['id']}/test")

    assert response.status_code == 202
    delivery = response.json()
    assert delivery["event_type"] == "webhook.test" and delivery["status"] == "succeeded"
    [received] = receiver.received
    assert received.path == "/tested"
    assert json.loads(received.body)["data"] == {"webhook_id": webhook["id"]}
    assert verify_signature(webhook["secret"], received.headers["x-gateway-signature"], received.body)
    session_client.patch(f"{WEBHOOKS}/{webhook['id']}", {"is_active": False}, format="json")
    refused = session_client.post(f"{WEBHOOKS}/{webhook['id']}/test")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "webhook_inactive"


def test_a_failing_receiver_gets_three_attempts_on_the_schedule_and_no_fourth(
    session_client, organization, receiver
):
    receiver.always = 500
    create_webhook(session_client, receiver.url())
    start = datetime.now(UTC)
    failed_before = metric_value("gateway_webhook_deliveries_total", status="failed")

    with time_machine.travel(start, tick=False) as clock:
        event_id = raise_and_ingest(organization)
        [first] = attempts(event_id)
        assert first.status == "failed" and first.response_status == 500
        assert first.error == "HTTP 500: receiver says no" and first.failure_reason == "HTTP 500"
        assert first.next_attempt_at == start + timedelta(minutes=5)

        clock.move_to(start + timedelta(minutes=4))
        services.deliveries_due()  # not yet
        assert len(receiver.received) == 1

        clock.move_to(start + timedelta(minutes=5))
        services.deliveries_due()
        first, second = attempts(event_id)
        assert first.next_attempt_at is None  # the attempt it announced is made
        assert second.attempt == 2 and second.status == "failed"
        assert second.next_attempt_at == start + timedelta(minutes=5 + 25)

        clock.move_to(start + timedelta(minutes=29))
        services.deliveries_due()
        assert len(receiver.received) == 2

        clock.move_to(start + timedelta(minutes=30))
        services.deliveries_due()
        third = attempts(event_id)[2]
        assert third.attempt == 3 and third.status == "failed" and third.next_attempt_at is None

        clock.move_to(start + timedelta(days=2))
        services.deliveries_due()

    assert len(receiver.received) == 3
    assert [row.attempt for row in attempts(event_id)] == [1, 2, 3]
    assert metric_value("gateway_webhook_deliveries_total", status="failed") == failed_before + 3
    # Every attempt is signed and names its own delivery record.
    assert [received.headers["x-gateway-delivery"] for received in receiver.received] == [
        str(row.id) for row in attempts(event_id)
    ]


def test_a_receiver_that_recovers_gets_the_retry_and_the_schedule_stops(
    session_client, organization, receiver
):
    receiver.statuses = [503]
    create_webhook(session_client, receiver.url())
    start = datetime.now(UTC)
    succeeded_before = metric_value("gateway_webhook_deliveries_total", status="succeeded")

    with time_machine.travel(start, tick=False) as clock:
        event_id = raise_and_ingest(organization)
        clock.move_to(start + timedelta(minutes=5))
        services.deliveries_due()
        clock.move_to(start + timedelta(days=1))
        services.deliveries_due()

    assert [(row.attempt, row.status) for row in attempts(event_id)] == [(1, "failed"), (2, "succeeded")]
    assert len(receiver.received) == 2
    assert metric_value("gateway_webhook_deliveries_total", status="succeeded") == succeeded_before + 1


def test_a_manual_retry_makes_a_new_attempt_and_a_delivered_event_is_a_409(
    session_client, organization, receiver
):
    receiver.statuses = [500]
    create_webhook(session_client, receiver.url())
    event_id = raise_and_ingest(organization)
    [failed] = attempts(event_id)
    assert failed.next_attempt_at is not None

    response = session_client.post(f"{DELIVERIES}/{failed.id}/retry")

    assert response.status_code == 202, response.content
    retry = response.json()
    assert retry["attempt"] == 2 and retry["status"] == "succeeded" and retry["event_id"] == event_id
    failed.refresh_from_db()
    assert failed.next_attempt_at is None  # the automatic retry it announced is not made as well
    assert len(receiver.received) == 2
    for delivery_id in (failed.id, retry["id"]):
        conflict = session_client.post(f"{DELIVERIES}/{delivery_id}/retry")
        assert conflict.status_code == 409
        assert conflict.json()["error"]["code"] == "already_delivered"
    services.deliveries_due()
    assert len(receiver.received) == 2


def test_another_organizations_delivery_cannot_be_retried_or_seen(
    session_client, organization, outsider, client_for, receiver
):
    receiver.always = 500
    create_webhook(session_client, receiver.url())
    event_id = raise_and_ingest(organization)
    [delivery] = attempts(event_id)
    other = client_for(outsider.organization, "owner")

    assert other.post(f"{DELIVERIES}/{delivery.id}/retry").status_code == 404
    assert other.get(DELIVERIES).json()["results"] == []
    assert other.get(DELIVERIES, {"webhook": str(delivery.webhook_id)}).json()["results"] == []
    assert session_client.post(f"{DELIVERIES}/not-an-id/retry").status_code == 404
    assert len(attempts(event_id)) == 1


def test_the_history_lists_attempts_newest_first_with_filters_and_cursor_pages(
    session_client, organization, client_for, receiver
):
    budget_hook = create_webhook(session_client, receiver.url(path="/budget"), events=["budget.exceeded"])
    policy_hook = create_webhook(session_client, receiver.url(path="/policy"), events=["policy.blocked"])
    receiver.statuses = [500]
    raise_and_ingest(organization, "budget.exceeded")  # fails
    raise_and_ingest(organization, "policy.blocked")
    raise_and_ingest(organization, "budget.exceeded")
    member = client_for(organization, "member")

    everything = member.get(DELIVERIES).json()["results"]
    assert [row["event_type"] for row in everything] == [
        "budget.exceeded",
        "policy.blocked",
        "budget.exceeded",
    ]
    assert set(everything[0]) == {
        "id",
        "webhook_id",
        "event_id",
        "event_type",
        "attempt",
        "status",
        "response_status",
        "duration_ms",
        "error",
        "created_at",
        "next_attempt_at",
    }
    by_webhook = member.get(DELIVERIES, {"webhook": policy_hook["id"]}).json()["results"]
    assert [row["webhook_id"] for row in by_webhook] == [policy_hook["id"]]
    failed = member.get(DELIVERIES, {"status": "failed"}).json()["results"]
    assert [(row["webhook_id"], row["response_status"]) for row in failed] == [(budget_hook["id"], 500)]
    assert failed[0]["next_attempt_at"] is not None
    assert len(member.get(DELIVERIES, {"event_type": "budget.exceeded"}).json()["results"]) == 2
    first_page = member.get(DELIVERIES, {"limit": 2}).json()
    second_page = member.get(first_page["next"]).json()
    assert [row["id"] for row in first_page["results"] + second_page["results"]] == [
        row["id"] for row in everything
    ]
    for bad in ({"status": "lost"}, {"event_type": "nope"}, {"webhook": "nope"}):
        assert member.get(DELIVERIES, bad).status_code == 400
    assert member.post(f"{DELIVERIES}/{failed[0]['id']}/retry").status_code == 403


def test_a_receiver_that_never_answers_fails_the_attempt_within_its_timeout(
    session_client, organization, receiver
):
    receiver.hang = True
    create_webhook(session_client, receiver.url())
    started = time.monotonic()

    event_id = raise_and_ingest(organization)

    assert time.monotonic() - started < READ_TIMEOUT + 3
    [delivery] = attempts(event_id)
    assert delivery.status == "failed" and delivery.response_status is None
    assert delivery.error == f"No answer within {READ_TIMEOUT:g} s."
    assert delivery.failure_reason == "no answer in time"
    assert READ_TIMEOUT * 1000 <= delivery.duration_ms < (READ_TIMEOUT + 3) * 1000
    assert delivery.next_attempt_at is not None


def test_redirects_are_not_followed(session_client, organization, receiver):
    receiver.statuses = [302]
    create_webhook(session_client, receiver.url())

    event_id = raise_and_ingest(organization)

    [delivery] = attempts(event_id)
    assert delivery.status == "failed" and delivery.response_status == 302
    assert "redirects are not followed" in delivery.error
    assert delivery.failure_reason == "redirect not followed"
    assert len(receiver.received) == 1


def test_tls_is_verified_against_ssl_cert_file(session_client, organization, receiver, monkeypatch, tmp_path):
    create_webhook(session_client, receiver.url())
    # Another CA file: the receiver's self-signed certificate is no longer trusted.
    other = tmp_path / "other"
    other.mkdir()
    from tests.webhooks.receiver import make_certificate

    monkeypatch.setenv("SSL_CERT_FILE", str(make_certificate(other)[0]))

    event_id = raise_and_ingest(organization)

    [delivery] = attempts(event_id)
    assert delivery.status == "failed" and "CERTIFICATE_VERIFY_FAILED" in delivery.error
    assert delivery.failure_reason == "TLS certificate not trusted"
    assert receiver.received == []


@contextlib.contextmanager
def broker_down():
    """Eager mode off and a broker nothing listens on. Celery keeps the connection pools it made
    for the configured broker (an eager call makes them too): dropped before and after, as Celery
    does after a fork, so the publish really connects to the dead broker."""
    saved = {"task_always_eager": celery_app.conf.task_always_eager, "broker_url": celery_app.conf.broker_url}

    def drop_pools() -> None:
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    drop_pools()
    celery_app.conf.update(task_always_eager=False, broker_url="redis://127.0.0.1:9/0")
    try:
        yield
    finally:
        celery_app.conf.update(**saved)
        drop_pools()


def test_with_the_broker_down_the_delivery_waits_and_deliveries_due_sends_it(
    session_client, organization, receiver, caplog
):
    create_webhook(session_client, receiver.url())
    with broker_down(), caplog.at_level(logging.WARNING, logger="apps.webhooks.services"):
        event_id = raise_and_ingest(organization)

    assert "not enqueued (OperationalError)" in caplog.text
    [pending] = attempts(event_id)
    assert pending.status == "pending" and receiver.received == []
    assert Event.objects.filter(id=event_id).exists()

    assert services.deliveries_due() == 1  # the beat job, once the broker is back

    [delivered] = attempts(event_id)
    assert delivered.status == "succeeded" and len(receiver.received) == 1
    assert services.deliveries_due() == 0
    assert len(receiver.received) == 1


@pytest.fixture
def dns(monkeypatch):
    """Answers for hooks.example.test, as a resolver would give them; other names resolve as usual.
    Counts the look-ups of that name."""
    real = socket.getaddrinfo
    answers = {"hooks.example.test": "127.0.0.1"}
    lookups = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            lookups.append(host)
            return real(answers[host], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


def test_the_delivery_connects_to_the_address_it_checked_keeping_the_name_for_tls_and_host(
    session_client, organization, receiver, dns
):
    _, lookups = dns
    webhook = create_webhook(session_client, receiver.url(host="hooks.example.test"))
    lookups.clear()

    raise_and_ingest(organization)

    [received] = receiver.received
    assert received.headers["host"] == f"hooks.example.test:{receiver.port}"
    assert verify_signature(webhook["secret"], received.headers["x-gateway-signature"], received.body)
    assert lookups == ["hooks.example.test"]  # once, by the check; the connection used its answer


def test_a_dns_answer_that_changes_after_creation_is_checked_again_and_refused(
    session_client, organization, receiver, dns
):
    answers, _ = dns
    create_webhook(session_client, receiver.url(host="hooks.example.test"))
    answers["hooks.example.test"] = "169.254.169.254"

    event_id = raise_and_ingest(organization)

    [delivery] = attempts(event_id)
    assert delivery.status == "failed" and delivery.response_status is None
    assert "169.254.169.254 is link-local or a metadata service" in delivery.error
    assert delivery.error.startswith("Not sent:") and delivery.failure_reason == "address not allowed"
    assert receiver.received == []


def test_a_loopback_receiver_is_refused_at_delivery_when_the_setting_is_turned_off(
    session_client, organization, receiver, settings
):
    create_webhook(session_client, receiver.url())
    settings.GATEWAY_ALLOW_PRIVATE_WEBHOOKS = False

    event_id = raise_and_ingest(organization)

    [delivery] = attempts(event_id)
    assert delivery.status == "failed" and "GATEWAY_ALLOW_PRIVATE_WEBHOOKS" in delivery.error
    assert receiver.received == []


def test_a_webhook_disabled_after_its_event_is_not_sent_and_not_retried(
    session_client, organization, receiver
):
    receiver.always = 500
    webhook = create_webhook(session_client, receiver.url())
    event_id = raise_and_ingest(organization)
    session_client.patch(f"{WEBHOOKS}/{webhook['id']}", {"is_active": False}, format="json")

    with time_machine.travel(datetime.now(UTC) + timedelta(minutes=6), tick=True):
        services.deliveries_due()

    _, second = attempts(event_id)
    assert second.status == "failed" and second.error == "Not sent: the webhook is disabled."
    assert second.failure_reason == "webhook disabled"
    assert second.next_attempt_at is None
    assert len(receiver.received) == 1
    conflict = session_client.post(f"{DELIVERIES}/{second.id}/retry")
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "webhook_inactive"
