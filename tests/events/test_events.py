"""Events are raised on the outbox and written by its ingest: one row per event, whatever happens
to the batch on the way."""

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings

from apps.events.models import Event, EventType
from apps.events.publish import KIND, raise_event
from apps.events.selectors import events_of
from apps.outbox import spool
from apps.outbox.outbox import outbox
from tests.factories import OrganizationFactory

# The ingest writes from a thread of its own, on its own connection: it must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


def spooled_payloads() -> list[dict]:
    """The event payloads this process has spooled and the ingest has not yet written."""
    outbox().writer.seal()
    payloads = []
    for path in spool.waiting_files(Path(settings.GATEWAY_OUTBOX_DIR)):
        with open(path, "rb") as file:
            for chunk in spool.read_lines(file, 1000, []):
                payloads += [payload for kind, payload in chunk if kind == KIND]
    return payloads


def test_a_raised_event_is_written_by_the_ingest_as_it_was_raised():
    organization = OrganizationFactory()
    before = datetime.now(UTC)

    event_id = raise_event(
        organization.id,
        EventType.BUDGET_THRESHOLD_REACHED,
        {"budget": "team", "threshold": 80, "spent_usd": Decimal("20.00000000")},
    )

    assert not Event.objects.filter(id=event_id).exists()  # nothing is written on the caller's path
    assert outbox().flush()
    event = Event.objects.get(id=event_id)
    assert event.organization_id == organization.id
    assert event.type == "budget.threshold_reached"
    assert event.data == {"budget": "team", "threshold": 80, "spent_usd": "20.00000000"}
    assert before <= event.created_at <= datetime.now(UTC)


def test_the_payload_is_plain_versioned_json_with_an_rfc3339_time():
    organization = OrganizationFactory()

    event_id = raise_event(organization.id, "api_key.created", {"api_key_id": uuid.UUID(int=7)})

    [payload] = [payload for payload in spooled_payloads() if payload["id"] == event_id]
    assert payload["v"] == 1
    assert payload["type"] == "api_key.created"
    assert payload["organization_id"] == str(organization.id)
    assert payload["data"] == {"api_key_id": str(uuid.UUID(int=7))}
    assert payload["created_at"].endswith("Z")
    assert datetime.fromisoformat(payload["created_at"]).tzinfo is not None
    assert outbox().flush()


def test_an_event_written_twice_is_one_row():
    organization = OrganizationFactory()
    event_id = raise_event(organization.id, EventType.API_KEY_REVOKED, {"api_key_id": "k"})
    [payload] = [payload for payload in spooled_payloads() if payload["id"] == event_id]
    assert outbox().flush()

    # The same line again, as after a crash between the insert and the spool file's removal.
    outbox().put(KIND, payload)
    outbox().put(KIND, payload)
    assert outbox().flush()

    assert Event.objects.filter(id=event_id).count() == 1
    assert Event.objects.count() == 1


def test_events_of_a_deleted_organization_are_skipped_without_a_dead_letter():
    organization, other = OrganizationFactory(), OrganizationFactory()
    gone = raise_event(organization.id, EventType.POLICY_BLOCKED, {"policy": "no-secrets"})
    kept = raise_event(other.id, EventType.POLICY_BLOCKED, {"policy": "no-secrets"})
    organization.delete()
    dead_lettered = outbox().dead_lettered

    assert outbox().flush()

    assert not Event.objects.filter(id=gone).exists()
    assert Event.objects.filter(id=kept).exists()
    assert outbox().dead_lettered == dead_lettered


def test_an_unknown_type_is_refused_when_raised():
    organization = OrganizationFactory()

    with pytest.raises(ValueError, match="unknown event type"):
        raise_event(organization.id, "budget.exploded", {})
    with pytest.raises(ValueError):
        raise_event(organization.id, EventType.WEBHOOK_TEST, ["not", "an", "object"])

    assert spooled_payloads() == []


def test_every_type_of_the_decisions_is_known():
    assert set(EventType.values) == {
        "policy.blocked",
        "policy.redacted",
        "budget.threshold_reached",
        "budget.exceeded",
        "api_key.created",
        "api_key.revoked",
        "provider_key.rotated",
        "provider.failover",
        "webhook.test",
        "experiment.started",
        "experiment.completed",
    }


def test_data_no_database_would_take_is_normalised_not_lost():
    organization = OrganizationFactory()

    event_id = raise_event(
        organization.id,
        EventType.POLICY_REDACTED,
        {"reason": "a\x00b", "nested": [{"k\x00": "\ud800"}], "long": "x" * 10_000},
    )
    assert outbox().flush()

    event = Event.objects.get(id=event_id)
    assert event.data["reason"] == "ab"
    assert event.data["nested"] == [{"k": "\ufffd"}]
    assert len(event.data["long"]) < 10_000


def test_a_huge_data_object_is_cut_to_a_marker():
    organization = OrganizationFactory()

    event_id = raise_event(organization.id, EventType.PROVIDER_FAILOVER, {"attempts": ["y" * 1000] * 200})
    assert outbox().flush()

    assert Event.objects.get(id=event_id).data == {"truncated": True}


def test_events_are_walled_off_per_organization():
    organization, outsider = OrganizationFactory(), OrganizationFactory()
    ours = raise_event(organization.id, EventType.API_KEY_CREATED, {})
    blocked = raise_event(organization.id, EventType.POLICY_BLOCKED, {})
    theirs = raise_event(outsider.id, EventType.API_KEY_CREATED, {})
    assert outbox().flush()

    assert {str(event.id) for event in events_of(organization)} == {ours, blocked}
    assert [str(event.id) for event in events_of(organization, type="api_key.created")] == [ours]
    assert [str(event.id) for event in events_of(outsider)] == [theirs]
    assert not events_of(outsider, type="policy.blocked").exists()


def test_events_of_lists_the_newest_first():
    organization = OrganizationFactory()
    first = raise_event(organization.id, EventType.WEBHOOK_TEST, {})
    second = raise_event(organization.id, EventType.WEBHOOK_TEST, {})
    assert outbox().flush()

    events = list(events_of(organization))
    assert [str(event.id) for event in events] == [second, first]
    assert events[0].created_at - events[1].created_at < timedelta(seconds=5)
