"""Events in the Django admin: shown to staff, never added, changed or deleted there."""

import uuid
from datetime import UTC, datetime

import pytest
from django.test import Client

from apps.events.models import Event, EventType
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/events/event/"


@pytest.fixture
def admin_browser() -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def event() -> Event:
    return Event.objects.create(
        id=uuid.uuid4(),
        organization=OrganizationFactory(),
        type=EventType.BUDGET_EXCEEDED,
        created_at=datetime(2026, 11, 20, 12, tzinfo=UTC),
        data={"budget": "organization"},
    )


def test_staff_see_events_in_the_list_and_on_their_page(admin_browser, event):
    listed = admin_browser.get(LIST)
    assert listed.status_code == 200
    assert "budget.exceeded" in listed.content.decode()

    page = admin_browser.get(f"{LIST}{event.id}/change/")
    assert page.status_code == 200
    assert "organization" in page.content.decode()


def test_the_admin_console_refuses_to_add_change_or_delete_an_event(admin_browser, event):
    assert admin_browser.get(f"{LIST}add/").status_code == 403
    changed = admin_browser.post(f"{LIST}{event.id}/change/", {"type": "webhook.test", "data": "{}"})
    assert changed.status_code == 403
    assert admin_browser.post(f"{LIST}{event.id}/delete/", {"post": "yes"}).status_code == 403

    event.refresh_from_db()
    assert event.type == "budget.exceeded"
