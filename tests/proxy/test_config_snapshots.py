"""The organization's configuration is assembled from each domain's snapshot selector: plain frozen
data, read in as few queries as before, and kept until its generation changes."""

import dataclasses

import pytest

from apps.proxy.config import load_organization_config
from tests.factories import TeamFactory
from tests.proxy.conftest import add_alias, add_provider_key

pytestmark = pytest.mark.django_db


def test_the_configuration_is_read_in_thirteen_queries_at_most(
    organization, upstream, django_assert_max_num_queries
):
    add_provider_key(organization, upstream)
    add_provider_key(organization, upstream, provider="anthropic")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"), ("anthropic", "claude-3-5-haiku-latest"))
    TeamFactory(organization=organization)

    with django_assert_max_num_queries(13):  # the policies, the prompt templates (3), the experiments (2)
        config = load_organization_config(str(organization.id), 1)

    assert sorted(config.keys_by_provider) == ["anthropic", "openai"]
    assert [d.provider for d in config.aliases["fast"].deployments] == ["openai", "anthropic"]
    assert len(config.teams_by_id) == 1


def test_the_configuration_holds_only_frozen_snapshots(organization, upstream):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    TeamFactory(organization=organization)

    config = load_organization_config(str(organization.id), 1)

    [key] = config.keys_by_provider["openai"]
    [team] = config.teams_by_id.values()
    for snapshot in (key, team, config.aliases["fast"], config.aliases["fast"].deployments[0]):
        first_field = dataclasses.fields(snapshot)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(snapshot, first_field, "changed")


def test_a_deleted_organization_has_no_configuration(organization):
    organization_id = str(organization.id)
    organization.delete()

    assert load_organization_config(organization_id, 1) is None
