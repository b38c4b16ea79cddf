"""POST /api/v1/organizations/current/cache/purge: every tier of one organization, and only its."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.cache.memory import LocalCache
from apps.cache.models import SemanticEntry
from apps.cache.services import semantic_entries_expire
from apps.cache.shared import cache_epoch
from apps.cache.tasks import expire_semantic_entries
from apps.core.generations import local_generation
from tests.cache.conftest import cached, completion
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/organizations/current/cache/purge"


def entry(organization, *, expires_in: int = 3600) -> SemanticEntry:
    return SemanticEntry.objects.create(
        organization=organization,
        model="openai/gpt-4o-mini",
        embedding_model="text-embedding-3-small",
        dims=2,
        vector=b"\x00\x00\x80?\x00\x00\x00\x00",
        answer=cached(completion()).dumps(),
        fingerprint="f" * 64,
        expires_at=timezone.now() + timedelta(seconds=expires_in),
    )


@pytest.mark.parametrize("role", ["owner", "admin"])
def test_an_admin_purges_every_tier_of_the_organization(
    client_for, organization, outsider, role, django_capture_on_commit_callbacks
):
    mine, theirs = entry(organization), entry(outsider.organization)
    l1 = LocalCache()
    l1.put("an-entry", local_generation(organization.id), cached(completion()), 60)
    epochs = cache_epoch(organization.id), cache_epoch(outsider.organization_id)

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(organization, role).post(URL)

    assert response.status_code == 202, response.content
    assert response.json() == {"purged": True}
    # L1: the generation moved on, so what was stored under the old one is a miss in every process.
    assert l1.get("an-entry", local_generation(organization.id)) is None
    # L3: the organization's rows are gone, the outsider's are not.
    assert not SemanticEntry.objects.filter(pk=mine.pk).exists()
    assert SemanticEntry.objects.filter(pk=theirs.pk).exists()
    # L2: a new epoch in every key (there is no L2 without Redis).
    if settings.REDIS_URL:
        assert cache_epoch(organization.id) == epochs[0] + 1
    assert cache_epoch(outsider.organization_id) == epochs[1]


def test_a_member_cannot_purge(client_for, organization):
    kept = entry(organization)
    epoch = cache_epoch(organization.id)

    response = client_for(organization, "member").post(URL)

    assert_error(response, 403, "permission_denied")
    assert SemanticEntry.objects.filter(pk=kept.pk).exists()
    assert cache_epoch(organization.id) == epoch


def test_it_needs_a_session(api_client):
    assert_error(api_client.post(URL), 401, "not_authenticated")


def test_only_post_is_allowed(session_client):
    assert_error(session_client.get(URL), 405, "method_not_allowed")


def test_the_periodic_clean_up_deletes_only_expired_entries(organization, outsider):
    expired = [entry(organization, expires_in=-1) for _ in range(3)] + [
        entry(outsider.organization, expires_in=-1)
    ]
    alive = entry(organization)

    assert expire_semantic_entries.delay().get() == 4

    assert not SemanticEntry.objects.filter(pk__in=[row.pk for row in expired]).exists()
    assert SemanticEntry.objects.filter(pk=alive.pk).exists()


def test_the_clean_up_works_in_batches(organization):
    for _ in range(5):
        entry(organization, expires_in=-1)

    assert semantic_entries_expire(batch=2) == 5
    assert SemanticEntry.objects.count() == 0


def test_with_redis_unreachable_nothing_is_purged_and_the_answer_says_so(
    session_client, organization, monkeypatch, settings
):
    import redis

    from apps.cache import shared

    mine = entry(organization)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # a deployment with Redis (in the embedded run too)
    closed = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    monkeypatch.setattr(shared, "sync_client", lambda: closed)

    error = assert_error(session_client.post(URL), 503, "cache_unavailable")

    assert error["type"] == "service_unavailable_error"
    assert SemanticEntry.objects.filter(pk=mine.pk).exists()
