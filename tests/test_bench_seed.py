"""`make bench` seeds its organization through the same services the management API uses
(bench/seed.py); the suite runs that seeding, so a service whose signature changes cannot leave the
benchmark broken until someone next runs it."""

import pytest

from apps.keys.models import ApiKey
from apps.policies.models import Policy
from apps.prompts.models import PromptVersion
from bench import seed


@pytest.mark.django_db
def test_the_benchmarks_seed_creates_what_the_benchmark_calls():
    created = seed.create("http://127.0.0.1:9/v1")

    keys = ApiKey.objects.filter(organization_id=created["organization_id"])
    assert keys.count() == 3 and created["api_key"].startswith("sk_live_")
    assert Policy.objects.filter(organization_id=created["organization_id"]).count() == 10
    assert PromptVersion.objects.filter(template__slug=created["template"]).count() == 1

    seed.delete(created["organization_id"])

    assert not ApiKey.objects.filter(organization_id=created["organization_id"]).exists()
