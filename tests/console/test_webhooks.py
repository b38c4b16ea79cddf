"""The console's webhook pages: endpoints (the secret shown once), edit, delete, the delivery history
with the API's filters and cursor pages, retry (409 shown), test and the secret roll; roles,
tenancy, CSRF and refused input."""

import re
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
    assert response["Location"] == f"{HISTORY}{delivery.id}/"
    assert delivery.event_type == "webhook.test" and delivery.event.data == {"webhook_id": str(webhook.id)}
    services.webhook_update(webhook=webhook, data={"is_active": False})
    response = post_form(client, page_of(webhook), f"{page_of(webhook)}test", {})
    assert response.status_code == 409 and "The webhook is disabled" in response.content.decode()
    assert WebhookDelivery.objects.count() == 1


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
