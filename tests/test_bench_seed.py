"""`make bench` seeds its organization through the same services the management API uses
(bench/seed.py); the suite runs that seeding, so a service whose signature changes cannot leave the
benchmark broken until someone next runs it."""

import pytest

from apps.catalog.models import ModelAlias
from apps.keys.models import ApiKey
from apps.policies.models import Policy
from apps.prompts.models import PromptVersion
from apps.providers.models import ProviderKey
from bench import seed


@pytest.mark.django_db
def test_the_benchmarks_seed_creates_what_the_benchmark_calls():
    created = seed.create("http://127.0.0.1:9/v1")

    keys = ApiKey.objects.filter(organization_id=created["organization_id"])
    assert keys.count() == 3 and created["api_key"].startswith("sk_live_")
    assert Policy.objects.filter(organization_id=created["organization_id"]).count() == 10
    assert PromptVersion.objects.filter(template__slug=created["template"]).count() == 1
    # The Responses and Messages cases: each API native through one alias, bridged through the other.
    keys_by_provider = {
        key.provider: key.base_url
        for key in ProviderKey.objects.filter(organization_id=created["organization_id"])
    }
    assert keys_by_provider == {"openai": "http://127.0.0.1:9/v1", "anthropic": "http://127.0.0.1:9"}
    aliases = ModelAlias.objects.filter(organization_id=created["organization_id"])
    assert {alias.alias for alias in aliases} == {created["model"], created["anthropic_model"]}

    seed.delete(created["organization_id"])

    assert not ApiKey.objects.filter(organization_id=created["organization_id"]).exists()
