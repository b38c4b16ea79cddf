from datetime import UTC, datetime
from decimal import Decimal

import factory
from django.utils.text import slugify

from apps.accounts.models import User
from apps.catalog.models import Deployment, ModelAlias, ModelPrice
from apps.keys import services as key_services
from apps.keys.models import ApiKey
from apps.organizations.models import Membership, Organization, Role
from apps.providers import services as provider_services
from apps.providers.models import ProviderKey
from apps.teams.models import Team

PASSWORD = "a-long-test-password"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    email_verified = True  # as the operator makes accounts; one made through an invitation link is not
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class OrganizationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Organization

    name = factory.Sequence(lambda n: f"Organization {n}")
    slug = factory.LazyAttribute(lambda o: slugify(o.name))
    plan = "growth"


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    organization = factory.SubFactory(OrganizationFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.OWNER


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    organization = factory.SubFactory(OrganizationFactory)
    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.LazyAttribute(lambda o: slugify(o.name))


def create_api_key(organization: Organization, *, created_by=None, **values) -> tuple[ApiKey, str]:
    """Keys go through the service: it is the only place a secret is made. ``values``: the API's body
    (a ``team`` for its ``team_id``)."""
    values.setdefault("name", "test key")
    if "team" in values:
        team = values.pop("team")
        values["team_id"] = None if team is None else str(team.pk)
    return key_services.api_key_create(organization=organization, data=values, created_by=created_by)


class ModelAliasFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelAlias

    organization = factory.SubFactory(OrganizationFactory)
    alias = factory.Sequence(lambda n: f"model-{n}")


class DeploymentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Deployment

    alias = factory.SubFactory(ModelAliasFactory)
    provider = "openai"
    upstream_model = "gpt-4o-mini"


class ModelPriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelPrice

    organization = factory.SubFactory(OrganizationFactory)
    provider = "openai"
    model = "gpt-4o-mini"
    input_per_mtok = Decimal("0.15")
    output_per_mtok = Decimal("0.60")
    effective_from = datetime(2025, 1, 1, tzinfo=UTC)


def create_provider_key(
    organization: Organization, secret: str = "sk-upstream-0000-abcd", **kwargs
) -> ProviderKey:
    """Provider keys go through the service: it is the only place a secret is encrypted."""
    kwargs.setdefault("provider", "openai")
    kwargs.setdefault("data_region", "us")
    return provider_services.provider_key_create(organization=organization, data={"key": secret, **kwargs})
