import factory
from django.utils.text import slugify

from apps.accounts.models import User
from apps.keys import services as key_services
from apps.keys.models import ApiKey
from apps.organizations.models import Membership, Organization, Role
from apps.teams.models import Team

PASSWORD = "a-long-test-password"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
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


def create_api_key(organization: Organization, **kwargs) -> tuple[ApiKey, str]:
    """Keys go through the service: it is the only place a secret is made."""
    kwargs.setdefault("name", "test key")
    return key_services.api_key_create(organization=organization, **kwargs)
