"""The console's webhook pages: endpoints (the secret shown once), edit, delete, the delivery history
with the API's filters and cursor pages, retry (409 shown), test and the secret roll; roles,
tenancy, CSRF and refused input."""

import re
import socket
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core import crypto
from apps.events.models import Event
from apps.webhooks import services
from apps.webhooks.models import Webhook, WebhookDelivery
from tests.console.conftest import post_form
from tests.secret_scan import ledger

pytestmark = pytest.mark.django_db

LIST = "/console/webhooks/"
NEW = "/console/webhooks/new"
HISTORY = "/console/webhooks/deliveries/"
SECRET = re.compile(r'id="webhook-secret" class="secret" readonly value="(whsec_[^"]+)"')


def make_webhook(organization, url="https://127.0.0.1:8443/hooks", **values) -> Webhook:
    webhook, secret = services.webhook_create(organization=organization, data={"url": url, **values})
    ledger.add(secret)  # the run's secret scan looks for it in logs and files
    return webhook


def make_delivery(webhook, *, status="failed", event_type="budget.exceeded", attempt=1, event=None, **values):
    if event is None:
        event = Event.objects.create(
            id=uuid.uuid4(),
            organization_id=webhook.organization_id,
            type=event_type,
            created_at=timezone.now(),
            data={},
        )
    return WebhookDelivery.objects.create(
        organization_id=webhook.organization_id,
        webhook=webhook,
        event=event,
        event_type=event.type,
        attempt=attempt,
        status=status,
        **values,
    )


def page_of(webhook) -> str:
    return f"/console/webhooks/{webhook.id}/"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def row_of(page: str, delivery) -> str:
    """The table row of ``delivery`` on a page (or the row fragment itself)."""
    found = re.search(rf'<tr id="delivery-{delivery.id}"[^>]*>.*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def send_test(client, webhook, capture) -> tuple[WebhookDelivery, list]:
    """Presses "Send a test event" on the webhook's page. The delivery's task is enqueued when the
    request's transaction commits: it runs (eagerly, as a worker would) when the returned callbacks
    are called."""
    with capture() as callbacks:
        response = post_form(client, page_of(webhook), f"{page_of(webhook)}test", {})
    assert response.status_code == 302
    return WebhookDelivery.objects.get(webhook=webhook, event_type="webhook.test"), callbacks


def test_a_member_reads_endpoints_and_deliveries_and_never_another_organizations(
    console_for, organization, outsider
):
    ours = make_webhook(organization, "https://127.0.0.1/ours", description="alerts")
    theirs = make_webhook(outsider.organization, "https://127.0.0.1/theirs")
    delivery = make_delivery(ours, response_status=500, error="HTTP 500: receiver says no", duration_ms=41)
    make_delivery(theirs, event_type="policy.blocked")
    client = console_for(organization, "member")
    listing = client.get(LIST).content.decode()
    assert "https://127.0.0.1/ours" in listing and "/theirs" not in listing
    assert "Add an endpoint" not in listing
    page = client.get(page_of(ours)).content.decode()
    assert "alerts" in page and "Roll the secret" not in page and "Send a test event" not in page
    history = client.get(HISTORY).content.decode()
    assert "budget.exceeded" in history and "policy.blocked</code>" not in history
    detail = client.get(f"{HISTORY}{delivery.id}/").content.decode()
    assert "HTTP 500: receiver says no" in detail and "41 ms" in detail and "Retry now" not in detail


def test_an_admin_creates_an_endpoint_and_sees_its_secret_once(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(
        client,
        NEW,
        NEW,
        {
            "url": " https://127.0.0.1:8443/hooks ",
            "events": ["budget.exceeded", "policy.blocked"],
            "description": "alerts",
            "is_active": "on",
        },
    )
    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    secret = SECRET.search(page).group(1)
    ledger.add(secret)
    assert len(secret) == 6 + 43 and "shown only once" in page and 'data-copy="#webhook-secret"' in page
    webhook = Webhook.objects.get(organization=organization)
    assert crypto.decrypt(webhook.secret_encrypted) == secret
    assert (webhook.url, webhook.events, webhook.description, webhook.is_active) == (
        "https://127.0.0.1:8443/hooks",
        ["budget.exceeded", "policy.blocked"],
        "alerts",
        True,
    )
    make_delivery(webhook)
    # Never again: not on the list, the endpoint's page, the history or a delivery's page.
    for path in (LIST, page_of(webhook), HISTORY, f"{HISTORY}{WebhookDelivery.objects.get().id}/"):
        assert secret not in client.get(path).content.decode()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"url": "http://127.0.0.1/hook", "events": ["*"]}, "https://"),
        ({"url": "https://169.254.169.254/latest", "events": ["*"]}, "metadata"),
        ({"url": "https://127.0.0.1/hook"}, "events"),
        ({"url": "https://127.0.0.1/hook", "events": ["budget.spent"]}, "is not a valid choice"),
        ({"url": "https://127.0.0.1/hook", "events": ["*"], "description": "x" * 501}, "description"),
    ],
)
def test_a_refused_endpoint_says_why_and_saves_nothing(console_for, organization, data, says):
    client = console_for(organization, "admin")
    response = post_form(client, NEW, NEW, data)
    assert response.status_code == 400
    assert says in response.content.decode()
    assert "whsec_" not in response.content.decode()
    assert not Webhook.objects.exists()


def test_an_admin_edits_and_deletes_an_endpoint(console_for, organization):
    webhook = make_webhook(organization)
    secret_before = webhook.secret_encrypted
    client = console_for(organization, "admin")
    page = page_of(webhook)
    response = post_form(
        client,
        page,
        f"{page}edit",
        {"url": "https://127.0.0.1:9443/new", "events": ["api_key.created"], "description": "keys"},
    )
    assert response.status_code == 302
    webhook.refresh_from_db()
    assert (webhook.url, webhook.events, webhook.description, webhook.is_active) == (
        "https://127.0.0.1:9443/new",
        ["api_key.created"],
        "keys",
        False,
    )
    assert webhook.secret_encrypted == secret_before  # editing never touches the secret
    refused = post_form(client, page, f"{page}edit", {"url": "ftp://x", "events": ["*"], "is_active": "on"})
    assert refused.status_code == 400
    webhook.refresh_from_db()
    assert webhook.url == "https://127.0.0.1:9443/new"
    assert post_form(client, page, f"{page}delete", {}).status_code == 302
    assert not Webhook.objects.exists()


def test_an_admin_sends_a_test_event(console_for, organization):
    webhook = make_webhook(organization, events=["budget.exceeded"])
    client = console_for(organization, "admin")
    response = post_form(client, page_of(webhook), f"{page_of(webhook)}test", {})
    assert response.status_code == 302
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert response["Location"] == f"{page_of(webhook)}#delivery-{delivery.id}"
    assert delivery.event_type == "webhook.test" and delivery.event.data == {"webhook_id": str(webhook.id)}
    services.webhook_update(webhook=webhook, data={"is_active": False})
    response = post_form(client, page_of(webhook), f"{page_of(webhook)}test", {})
    assert response.status_code == 409 and "The webhook is disabled" in response.content.decode()
    assert WebhookDelivery.objects.count() == 1


def test_a_test_delivery_updates_in_place_until_it_settles_then_stops_polling(
    console_for, organization, receiver, django_capture_on_commit_callbacks
):
    webhook = make_webhook(organization, receiver.url())
    client = console_for(organization, "admin")
    delivery, callbacks = send_test(client, webhook, django_capture_on_commit_callbacks)
    row_url = f"{HISTORY}{delivery.id}/row"
    summary_url = f"{HISTORY}{delivery.id}/summary"

    pending = row_of(client.get(page_of(webhook)).content.decode(), delivery)
    assert "pending" in pending and "sending…" in pending
    assert f'hx-get="{row_url}"' in pending and 'hx-trigger="every 1s"' in pending
    assert 'hx-swap="outerHTML"' in pending
    fragment = client.get(row_url)
    assert fragment.status_code == 200 and "hx-trigger" in fragment.content.decode()
    assert "<html" not in fragment.content.decode()
    summary = client.get(summary_url).content.decode()
    assert "pending" in summary and f'hx-get="{summary_url}"' in summary and "hx-trigger" in summary

    for callback in callbacks:  # the transaction commits: the worker sends it
        callback()

    assert len(receiver.received) == 1
    settled = row_of(client.get(row_url).content.decode(), delivery)
    assert "succeeded" in settled and '<td class="num">200</td>' in settled
    assert "hx-trigger" not in settled and "hx-get" not in settled
    summary = client.get(summary_url).content.decode()
    assert "succeeded" in summary and "<dd>200</dd>" in summary and "hx-trigger" not in summary
    page = client.get(f"{HISTORY}{delivery.id}/").content.decode()
    assert "hx-trigger" not in page and "<dd>200</dd>" in page


def test_the_history_row_of_a_pending_delivery_polls_with_its_endpoint_column(
    console_for, organization, receiver, django_capture_on_commit_callbacks
):
    webhook = make_webhook(organization, receiver.url())
    delivery, _ = send_test(console_for(organization, "admin"), webhook, django_capture_on_commit_callbacks)
    client = console_for(organization, "member")  # members follow deliveries too
    row = row_of(client.get(HISTORY).content.decode(), delivery)
    assert f'hx-get="{HISTORY}{delivery.id}/row?endpoint=1"' in row
    fragment = client.get(f"{HISTORY}{delivery.id}/row?endpoint=1").content.decode()
    assert webhook.url in fragment and "hx-trigger" in fragment
    assert webhook.url not in client.get(f"{HISTORY}{delivery.id}/row").content.decode()


def test_a_delivery_to_a_closed_port_shows_the_connection_error(
    console_for, organization, django_capture_on_commit_callbacks
):
    webhook = make_webhook(organization, f"https://127.0.0.1:{closed_port()}/hook")
    client = console_for(organization, "admin")
    delivery, callbacks = send_test(client, webhook, django_capture_on_commit_callbacks)
    for callback in callbacks:
        callback()

    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.response_status is None
    assert delivery.failure_reason == "connection refused"
    row = row_of(client.get(page_of(webhook)).content.decode(), delivery)
    assert "failed" in row and '<td class="num">connection refused</td>' in row and "hx-trigger" not in row
    page = client.get(f"{HISTORY}{delivery.id}/").content.decode()
    assert "no answer: connection refused" in page and "Connection refused" in page  # and the error


def test_a_receiver_that_answers_500_shows_its_status(
    console_for, organization, receiver, django_capture_on_commit_callbacks
):
    receiver.always = 500
    webhook = make_webhook(organization, receiver.url())
    client = console_for(organization, "admin")
    delivery, callbacks = send_test(client, webhook, django_capture_on_commit_callbacks)
    for callback in callbacks:
        callback()

    row = row_of(client.get(f"{HISTORY}{delivery.id}/row").content.decode(), delivery)
    assert "failed" in row and '<td class="num">500</td>' in row and "hx-trigger" not in row
    page = client.get(f"{HISTORY}{delivery.id}/").content.decode()
    assert "<dd>500</dd>" in page and "HTTP 500: receiver says no" in page


def test_a_delivery_to_an_address_no_longer_allowed_says_so(
    console_for, organization, receiver, settings, django_capture_on_commit_callbacks
):
    webhook = make_webhook(organization, receiver.url())
    client = console_for(organization, "admin")
    delivery, callbacks = send_test(client, webhook, django_capture_on_commit_callbacks)
    settings.GATEWAY_ALLOW_PRIVATE_WEBHOOKS = False  # checked again on the address it connects to
    for callback in callbacks:
        callback()

    assert receiver.received == []
    row = row_of(client.get(f"{HISTORY}{delivery.id}/row").content.decode(), delivery)
    assert '<td class="num">address not allowed</td>' in row


def test_a_row_recorded_before_failure_reasons_shows_the_start_of_its_error(console_for, organization):
    webhook = make_webhook(organization)
    delivery = make_delivery(webhook, error="ConnectError: [Errno 111] Connection refused")
    row = row_of(console_for(organization, "member").get(HISTORY).content.decode(), delivery)
    assert "ConnectError: [Errno 111] Connection refused" in row


@pytest.mark.parametrize("fragment", ["row", "row?endpoint=1", "summary"])
def test_another_organizations_or_a_deleted_delivery_stops_the_polling_and_shows_nothing(
    console_for, organization, outsider, fragment
):
    theirs = make_delivery(make_webhook(outsider.organization, "https://127.0.0.1/theirs"), status="pending")
    ours = make_delivery(make_webhook(organization, "https://127.0.0.1/ours"), status="pending")
    client = console_for(organization, "owner")
    ours_id = ours.id
    ours.webhook.delete()  # its deliveries go with it

    for delivery_id in (theirs.id, ours_id):
        response = client.get(f"{HISTORY}{delivery_id}/{fragment}")
        # 286: htmx's "stop polling" (a 404 is not swapped, and the page would go on asking).
        assert response.status_code == 286 and response.content == b""


def test_a_delivery_pending_for_long_is_no_longer_polled(console_for, organization, time_machine):
    delivery = make_delivery(make_webhook(organization), status="pending")
    time_machine.move_to(delivery.created_at + timedelta(minutes=11))
    row = row_of(console_for(organization, "member").get(HISTORY).content.decode(), delivery)
    assert "hx-trigger" not in row and "still pending: reload for its status" in row


def test_rolling_the_secret_shows_the_new_one_once_and_explains_the_overlap(console_for, organization):
    webhook = make_webhook(organization)
    old = crypto.decrypt(webhook.secret_encrypted)
    client = console_for(organization, "admin")
    response = post_form(client, page_of(webhook), f"{page_of(webhook)}roll-secret", {})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    page = response.content.decode()
    new = SECRET.search(page).group(1)
    ledger.add(new)
    assert new != old and old not in page
    assert "24 hours" in page and "two <code>v1=</code> signatures" in page
    webhook.refresh_from_db()
    assert webhook.signing_secrets() == [new, old]
    assert webhook.previous_secret_expires_at.strftime("%Y-%m-%d %H:%M") in page
    after = client.get(page_of(webhook)).content.decode()
    assert new not in after and old not in after and "the previous secret also signs until" in after


def test_the_history_filters_like_the_api(console_for, organization):
    first = make_webhook(organization, "https://127.0.0.1/first")
    second = make_webhook(organization, "https://127.0.0.1/second")
    make_delivery(first, status="failed", event_type="budget.exceeded")
    make_delivery(first, status="succeeded", event_type="policy.blocked")
    make_delivery(second, status="pending", event_type="api_key.created")
    client = console_for(organization, "member")

    def kinds(query: str) -> list[str]:
        response = client.get(f"{HISTORY}?{query}")
        assert response.status_code == 200
        return re.findall(r"<td><code>([a-z_.]+)</code></td>", response.content.decode())

    assert sorted(kinds("")) == ["api_key.created", "budget.exceeded", "policy.blocked"]
    assert sorted(kinds(f"webhook={first.id}")) == ["budget.exceeded", "policy.blocked"]
    assert kinds("status=failed") == ["budget.exceeded"]
    assert kinds("event_type=api_key.created&status=") == ["api_key.created"]
    assert kinds(f"webhook={first.id}&status=pending") == []


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("status=lost", "status"),
        ("webhook=not-an-id", "webhook"),
        ("event_type=nothing", "event_type"),
        ("cursor=forged", "This page link is not valid"),
        ("limit=none", "limit"),
    ],
)
def test_a_bad_filter_or_page_link_says_why(console_for, organization, query, says):
    make_delivery(make_webhook(organization))
    client = console_for(organization, "member")
    response = client.get(f"{HISTORY}?{query}")
    assert response.status_code == 400
    assert says in response.content.decode()


def test_the_history_pages_with_cursors(console_for, organization):
    webhook = make_webhook(organization)
    start = timezone.now() - timedelta(hours=1)
    for minute in range(55):
        delivery = make_delivery(webhook, attempt=1)
        WebhookDelivery.objects.filter(pk=delivery.pk).update(created_at=start + timedelta(minutes=minute))
    client = console_for(organization, "member")
    first = client.get(f"{HISTORY}?webhook={webhook.id}").content.decode()
    assert first.count("<td><code>budget.exceeded</code></td>") == 50
    older = re.search(r'<a class="button secondary" href="([^"]+)" rel="next">', first).group(1)
    assert older.startswith(HISTORY) and f"webhook={webhook.id}" in older and "cursor=" in older
    second = client.get(older.replace("&amp;", "&")).content.decode()
    assert second.count("<td><code>budget.exceeded</code></td>") == 5
    assert 'rel="prev"' in second and 'rel="next"' not in second
    small = client.get(f"{HISTORY}?limit=20").content.decode()
    assert small.count("<td><code>budget.exceeded</code></td>") == 20


def test_an_admin_retries_a_failed_delivery(console_for, organization):
    webhook = make_webhook(organization)
    failed = make_delivery(webhook, status="failed", next_attempt_at=timezone.now() + timedelta(minutes=5))
    client = console_for(organization, "admin")
    page = f"{HISTORY}{failed.id}/"
    response = post_form(client, page, f"{page}retry", {})
    assert response.status_code == 302
    retry = WebhookDelivery.objects.get(event=failed.event, attempt=2)
    assert response["Location"] == f"{HISTORY}{retry.id}/"
    assert retry.status == "pending"
    failed.refresh_from_db()
    assert failed.next_attempt_at is None  # the scheduled automatic retry is replaced


@pytest.mark.parametrize(
    ("other_status", "says"),
    [("succeeded", "already delivered"), ("pending", "under way")],
)
def test_a_refused_retry_is_shown_as_an_error(console_for, organization, other_status, says):
    webhook = make_webhook(organization)
    failed = make_delivery(webhook, status="failed")
    make_delivery(webhook, status=other_status, attempt=2, event=failed.event)
    client = console_for(organization, "admin")
    page = f"{HISTORY}{failed.id}/"
    response = post_form(client, page, f"{page}retry", {})
    assert response.status_code == 409
    assert says in response.content.decode() and "Not retried" in response.content.decode()
    assert WebhookDelivery.objects.count() == 2


@pytest.mark.parametrize(
    ("path", "data"),
    [
        (NEW, {"url": "https://127.0.0.1/sneaky", "events": ["*"]}),
        ("{page}edit", {"url": "https://127.0.0.1/renamed", "events": ["*"]}),
        ("{page}delete", {}),
        ("{page}test", {}),
        ("{page}roll-secret", {}),
        ("{delivery}retry", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    webhook = make_webhook(organization, "https://127.0.0.1/kept")
    delivery = make_delivery(webhook, status="failed")
    secret = webhook.secret_encrypted
    client = console_for(organization, "member")
    target = path.format(page=page_of(webhook), delivery=f"{HISTORY}{delivery.id}/")
    response = post_form(client, LIST, target, data)
    assert response.status_code == 403 and "whsec_" not in response.content.decode()
    webhook.refresh_from_db()
    assert (webhook.url, webhook.secret_encrypted) == ("https://127.0.0.1/kept", secret)
    assert Webhook.objects.count() == 1 and WebhookDelivery.objects.count() == 1


@pytest.mark.parametrize(
    "path",
    [
        "{page}",
        "{page}edit",
        "{page}delete",
        "{page}test",
        "{page}roll-secret",
        "{delivery}",
        "{delivery}retry",
    ],
)
def test_another_organizations_webhook_or_delivery_answers_404(console_for, organization, outsider, path):
    theirs = make_webhook(outsider.organization, "https://127.0.0.1/theirs")
    delivery = make_delivery(theirs, status="failed")
    secret = theirs.secret_encrypted
    client = console_for(organization, "owner")
    target = path.format(page=page_of(theirs), delivery=f"{HISTORY}{delivery.id}/")
    data = {"url": "https://127.0.0.1/mine", "events": ["*"]}
    response = client.get(target) if target.endswith("/") else post_form(client, LIST, target, data)
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert (theirs.url, theirs.secret_encrypted) == ("https://127.0.0.1/theirs", secret)
    assert WebhookDelivery.objects.count() == 1


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    webhook = make_webhook(organization)
    secret = webhook.secret_encrypted
    client = console_for(organization, "owner")
    response = client.post(f"{page_of(webhook)}roll-secret", {})
    assert response.status_code == 403 and "whsec_" not in response.content.decode()
    webhook.refresh_from_db()
    assert webhook.secret_encrypted == secret


def test_a_url_with_a_broken_international_host_is_refused_not_a_500(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(client, "/console/webhooks/new", "/console/webhooks/new", {"url": "https://xn--/"})
    assert response.status_code == 400
    assert not Webhook.objects.exists()
