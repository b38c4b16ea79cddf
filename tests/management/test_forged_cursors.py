"""Every cursor-paginated list refuses a forged cursor with a 404 (DRF's answer to a bad cursor),
never a 500: a cursor is base64 of a query string a client can write itself, and its position goes
into a filter on ``created_at``, where PostgreSQL refuses what Python accepts (an offset beyond
+-15:59)."""

import base64
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest

from apps.teams.models import Team
from tests.audit.entries import AuditEntryFactory
from tests.factories import ModelPriceFactory, TeamFactory, create_api_key, create_provider_key
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

LISTS = (
    "/api/v1/analytics/logs",
    "/api/v1/api-keys",
    "/api/v1/provider-keys",
    "/api/v1/teams",
    "/api/v1/models",
    "/api/v1/model-prices",
)


def cursor(**tokens: str) -> str:
    return base64.b64encode(urlencode(tokens).encode()).decode()


FORGED = (
    # Offsets Python accepts and PostgreSQL does not.
    cursor(p="2026-11-20 12:00:00+23:00"),
    cursor(p="2026-11-20 12:00:00-16:00"),
    cursor(p="2026-11-20T12:00:00+16:00", o="1", r="1"),
    # Outside the range of a datetime, before or after moving it to UTC.
    cursor(p="10000-01-01 00:00:00+00:00"),
    cursor(p="9999-12-31 23:59:59-15:00"),
    cursor(p="0001-01-01 00:00:00+15:00"),
    # Not a time at all, or one without an offset.
    cursor(p="NaN"),
    cursor(p="inf"),
    cursor(p="9" * 40),
    cursor(p=""),
    cursor(p="2026-11-20\x00"),
    cursor(p="2026-11-20 12:00:00"),
    cursor(p="2026-11-20"),
    # Offsets and directions that are not small non-negative integers.
    cursor(p="2026-11-20 12:00:00+00:00", o="9" * 5000),
    cursor(p="2026-11-20 12:00:00+00:00", o="NaN"),
    cursor(p="2026-11-20 12:00:00+00:00", r="yes"),
    # Not base64 of a query string.
    "not base64!",
    base64.b64encode(b"\xff\xfe\x00p=1").decode(),
    "é",
)


@pytest.fixture
def some_of_everything(organization, outsider):
    """A row in each list (and the outsider's), so a forged cursor meets real rows."""
    for org in (organization, outsider.organization):
        TeamFactory(organization=org)
        create_api_key(org)
        create_provider_key(org)
        ModelPriceFactory(organization=org)
        AuditEntryFactory(organization=org, created_at=datetime(2026, 11, 20, 12, tzinfo=UTC))


@pytest.mark.parametrize("path", LISTS)
def test_every_list_refuses_a_forged_cursor_with_a_404(session_client, some_of_everything, path):
    for forged in FORGED:
        response = session_client.get(path, {"cursor": forged})

        error = assert_error(response, 404, "not_found")
        assert error["message"] == "Invalid cursor", forged


@pytest.mark.parametrize("path", ["/api/v1/analytics/logs", "/api/v1/teams"])
def test_a_cursor_with_an_unusual_but_valid_offset_reads_the_same_instant(session_client, organization, path):
    """An offset PostgreSQL could take, even one with seconds, is moved to UTC first and reads the
    same rows as the cursor the gateway writes."""
    noon = datetime(2026, 11, 20, 12, tzinfo=UTC)
    for minutes in range(3):
        created_at = noon + timedelta(minutes=minutes)
        AuditEntryFactory(organization=organization, created_at=created_at)
        Team.objects.filter(pk=TeamFactory(organization=organization).pk).update(created_at=created_at)

    def page(position: str) -> list[str]:
        response = session_client.get(path, {"cursor": cursor(p=position)})
        assert response.status_code == 200, response.content
        return [row.get("log_id") or row["id"] for row in response.json()["results"]]

    written_by_the_gateway = page("2026-11-20 12:02:00+00:00")
    assert len(written_by_the_gateway) == 2
    assert page("2026-11-20T21:32:30.5+09:30:30.5") == written_by_the_gateway
    assert page("2026-11-20 01:04:00-10:58") == written_by_the_gateway
