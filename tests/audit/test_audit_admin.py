"""The audit log in the Django admin: browsable and filterable, never changed."""

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.audit.models import AuditEntry
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/audit/auditentry/"
NOON = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def make_entry(organization):
    def make(organization=organization, **fields) -> AuditEntry:
        return AuditEntry.objects.create(
            **{
                "id": uuid.uuid4(),
                "organization": organization,
                "created_at": NOON,
                "endpoint": "/v1/chat/completions",
                "api_key_prefix": "sk_live_abcd",
                "requested_model": "fast",
                "provider": "openai",
                "model": "gpt-4o-mini",
                "status": 200,
                "cost_usd": Decimal("0.00123400"),
                "latency_ms": 321.5,
                **fields,
            }
        )

    return make


def listed(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


def test_the_list_shows_entries_of_every_organization_without_reading_bodies(
    admin_browser, make_entry, outsider
):
    mine = make_entry(request_body="THE-REQUEST-BODY", response_body="THE-RESPONSE-BODY", cache="l1")
    theirs = make_entry(organization=outsider.organization, model="claude-3-5-haiku", provider="anthropic")

    with CaptureQueriesContext(connection) as queries:
        page = listed(admin_browser.get(LIST))

    assert f"{mine.id}" in page and f"{theirs.id}" in page
    assert "gpt-4o-mini" in page and "claude-3-5-haiku" in page
    assert "0.00123400" in page and "321.5" in page
    assert "THE-REQUEST-BODY" not in page
    entry_sql = [q["sql"] for q in queries.captured_queries if "audit_auditentry" in q["sql"]]
    assert entry_sql
    assert not any(
        "request_body" in sql or "response_body" in sql or '"attempts"' in sql for sql in entry_sql
    )


def test_the_detail_page_shows_attempts_decisions_and_bodies_escaped(admin_browser, make_entry):
    entry = make_entry(
        attempts=[{"provider": "openai", "status": 503, "outcome": "upstream_error"}],
        policy_decisions=[{"policy": "pii", "action": "redacted"}],
        request_body='{"messages": "<script>alert(1)</script>"}',
        response_body="THE-RESPONSE-BODY",
    )

    page = listed(admin_browser.get(f"{LIST}{entry.id}/change/"))

    assert "upstream_error" in page
    assert "&quot;policy&quot;: &quot;pii&quot;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page
    assert "THE-RESPONSE-BODY" in page
    assert 'name="_save"' not in page  # view only


def test_entries_cannot_be_added_changed_or_deleted(admin_browser, make_entry):
    entry = make_entry()

    assert admin_browser.get(f"{LIST}add/").status_code == 403
    assert admin_browser.post(f"{LIST}{entry.id}/change/", {"status": 500}).status_code == 403
    assert admin_browser.post(f"{LIST}{entry.id}/delete/", {"post": "yes"}).status_code == 403
    bulk = admin_browser.post(
        LIST, {"action": "delete_selected", "_selected_action": [entry.id], "post": "yes"}
    )
    assert bulk.status_code in (200, 302)
    assert AuditEntry.objects.get().status == 200
    assert 'href="/admin/audit/auditentry/add/"' not in listed(admin_browser.get(LIST))


def test_it_searches_by_request_id_and_api_key_prefix(admin_browser, make_entry):
    one = make_entry(api_key_prefix="sk_live_AAAA")
    two = make_entry(api_key_prefix="sk_live_BBBB")

    by_id = listed(admin_browser.get(LIST, {"q": str(one.id)}))
    by_prefix = listed(admin_browser.get(LIST, {"q": "sk_live_BB"}))

    assert str(one.id) in by_id and str(two.id) not in by_id
    assert str(two.id) in by_prefix and str(one.id) not in by_prefix


def test_it_filters_by_status_provider_cache_and_date(admin_browser, make_entry):
    ok = make_entry(cache="l2")
    failed = make_entry(status=502, provider="anthropic", created_at=NOON - timedelta(days=3))
    unrouted = make_entry(status=404, provider="", model="", cache="bypass")

    def shown(params) -> set[str]:
        page = listed(admin_browser.get(LIST, params))
        return {str(e.id) for e in (ok, failed, unrouted) if str(e.id) in page}

    assert shown({"status": "5xx"}) == {str(failed.id)}
    assert shown({"status": "4xx"}) == {str(unrouted.id)}
    assert shown({"provider": "anthropic"}) == {str(failed.id)}
    assert shown({"provider": "-"}) == {str(unrouted.id)}
    assert shown({"cache": "l2"}) == {str(ok.id)}
    assert shown({"created_at__year": "2026", "created_at__month": "11", "created_at__day": "20"}) == {
        str(ok.id),
        str(unrouted.id),
    }


def test_staff_without_permission_cannot_browse_the_log(make_entry):
    make_entry()
    staff = UserFactory(is_staff=True)
    MembershipFactory(user=staff)
    client = Client()
    client.force_login(staff)

    assert client.get(LIST).status_code == 403
