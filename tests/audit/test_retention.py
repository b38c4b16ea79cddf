"""Retention: entries older than their organization's log_retention_days are deleted, in batches."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.audit.models import AuditEntry
from apps.audit.retention import audit_retention_apply
from apps.audit.tasks import apply_audit_retention
from tests.audit.entries import AuditEntryFactory, bulk_entries
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def remaining(organization) -> set[datetime]:
    return set(AuditEntry.objects.filter(organization=organization).values_list("created_at", flat=True))


@time_machine.travel(NOW, tick=False)
def test_it_deletes_only_what_each_organization_no_longer_keeps():
    week = OrganizationFactory(log_retention_days=7)
    month = OrganizationFactory(log_retention_days=30)
    second = timedelta(seconds=1)
    week_kept = [NOW - timedelta(days=7) + second, NOW - timedelta(hours=1)]
    week_expired = [NOW - timedelta(days=7) - second, NOW - timedelta(days=20)]
    month_kept = [NOW - timedelta(days=30) + second, NOW - timedelta(days=20)]
    month_expired = [NOW - timedelta(days=30) - second, NOW - timedelta(days=400)]
    bulk_entries(week, week_kept + week_expired)
    bulk_entries(month, month_kept + month_expired)

    deleted = apply_audit_retention.delay().get()

    assert deleted == {str(week.id): 2, str(month.id): 2}
    assert remaining(week) == set(week_kept)
    assert remaining(month) == set(month_kept)


def test_an_entry_exactly_at_the_boundary_is_kept():
    organization = OrganizationFactory(log_retention_days=7)
    AuditEntryFactory(organization=organization, created_at=NOW - timedelta(days=7))

    with time_machine.travel(NOW, tick=False):
        assert audit_retention_apply() == {}
    with time_machine.travel(NOW + timedelta(microseconds=1), tick=False):
        assert audit_retention_apply() == {str(organization.id): 1}

    assert remaining(organization) == set()


def test_entries_expire_as_time_passes():
    organization = OrganizationFactory(log_retention_days=30)
    created = [NOW - timedelta(days=d) for d in (1, 10, 29)]
    bulk_entries(organization, created)

    with time_machine.travel(NOW, tick=False):
        assert audit_retention_apply() == {}
    with time_machine.travel(NOW + timedelta(days=5), tick=False):
        assert audit_retention_apply() == {str(organization.id): 1}
    with time_machine.travel(NOW + timedelta(days=30), tick=False):
        assert audit_retention_apply() == {str(organization.id): 2}

    assert remaining(organization) == set()


@time_machine.travel(NOW, tick=False)
def test_it_deletes_in_batches_of_ids_never_in_one_statement():
    organization = OrganizationFactory(log_retention_days=1)
    kept = NOW - timedelta(hours=1)
    bulk_entries(organization, [kept] + [NOW - timedelta(days=2, minutes=m) for m in range(7)])

    with CaptureQueriesContext(connection) as queries:
        deleted = audit_retention_apply(batch_size=3)

    assert deleted == {str(organization.id): 7}
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith("DELETE")]
    assert len(deletes) == 3  # 3 + 3 + 1
    assert all(" IN (" in sql.upper() for sql in deletes)
    assert remaining(organization) == {kept}


@time_machine.travel(NOW, tick=False)
def test_an_organization_without_expired_entries_is_left_alone():
    organization = OrganizationFactory(log_retention_days=7)
    bulk_entries(organization, [NOW - timedelta(days=1)])

    assert apply_audit_retention.delay().get() == {}
    assert len(remaining(organization)) == 1


@time_machine.travel(NOW, tick=False)
def test_a_retention_of_zero_days_set_outside_the_api_deletes_nothing():
    # The API takes 1 to 3650 days; 0 from the admin or a shell is not read as "delete everything".
    organization = OrganizationFactory(log_retention_days=0)
    bulk_entries(organization, [NOW - timedelta(days=100)])

    assert audit_retention_apply() == {}
    assert len(remaining(organization)) == 1


def test_retention_runs_every_hour():
    [schedule] = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == "apps.audit.tasks.apply_audit_retention"
    ]
    assert schedule["schedule"] == timedelta(hours=1)
