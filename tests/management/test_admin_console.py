import hashlib
import re
import warnings
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission as AuthPermission
from django.test import Client
from django.utils.deprecation import RemovedInDjango60Warning

from apps.catalog.models import ModelAlias, ModelPrice
from apps.keys.models import ApiKey
from apps.organizations.models import Invitation, Membership, Organization
from apps.organizations.services import invitation_accept
from apps.providers.models import ProviderKey
from apps.teams.models import Team, TeamMembership
from tests.factories import (
    DeploymentFactory,
    ModelAliasFactory,
    ModelPriceFactory,
    TeamFactory,
    UserFactory,
    create_api_key,
    create_provider_key,
)
from tests.management.admin_forms import admin_post, form_errors
from tests.management.generations import bumps_generation


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_admin_console_creates_a_key_and_shows_the_secret_once(admin_browser, organization):
    response = admin_browser.post(
        "/admin/keys/apikey/add/",
        {"organization": organization.id, "name": "from the console", "permissions": ["proxy:chat"]},
    )
    assert response.status_code == 200
    page = response.content.decode()
    secret = re.search(r'data-testid="api-key-secret">(sk_live_[\w-]{43})<', page).group(1)
    api_key = ApiKey.objects.get(name="from the console")
    assert api_key.key_digest == hashlib.sha256(secret.encode()).hexdigest()
    assert api_key.permissions == ["proxy:chat"]

    detail = admin_browser.get(f"/admin/keys/apikey/{api_key.id}/change/")
    assert detail.status_code == 200
    assert secret not in detail.content.decode()
    assert api_key.key_digest not in detail.content.decode()


def test_the_admin_console_refuses_a_team_of_another_organization(admin_browser, organization, outsider):
    foreign_team = TeamFactory(organization=outsider.organization)
    response = admin_browser.post(
        "/admin/keys/apikey/add/",
        {"organization": organization.id, "team": foreign_team.id, "name": "x", "permissions": ["proxy:llm"]},
    )
    assert response.status_code == 200
    assert "No such object in this organization." in response.content.decode()
    assert not ApiKey.objects.exists()


def test_the_admin_console_revokes_keys(admin_browser, api_key):
    key, _ = api_key
    response = admin_browser.post(
        "/admin/keys/apikey/", {"action": "revoke_selected", "_selected_action": [key.id]}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.status == "revoked"


# --- provider keys -----------------------------------------------------------------------------

PROVIDER_KEYS = "/admin/providers/providerkey"


def provider_key_form(organization, **overrides) -> dict:
    return {
        "organization": organization.id,
        "provider": "openai",
        "name": "from the console",
        "weight": "1",
        "data_region": "us",
        "base_url": "",
        "api_version": "",
        "supports_stream_usage": "on",
        "is_active": "on",
        "secret": "sk-console-secret-5555",
        **overrides,
    }


def test_the_provider_key_form_renders_without_deprecation_warnings(admin_browser, organization):
    key = create_provider_key(organization)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RemovedInDjango60Warning)
        add = admin_browser.get(f"{PROVIDER_KEYS}/add/")
        change = admin_browser.get(f"{PROVIDER_KEYS}/{key.id}/change/")

    assert add.status_code == 200
    assert change.status_code == 200


def test_the_admin_console_creates_a_provider_key_with_an_encrypted_secret(admin_browser, organization):
    response = admin_browser.post(f"{PROVIDER_KEYS}/add/", provider_key_form(organization))

    assert response.status_code == 302, response.content.decode()
    key = ProviderKey.objects.get()
    assert key.organization == organization
    assert key.secret() == "sk-console-secret-5555"
    assert "sk-console-secret-5555" not in key.secret_encrypted
    detail = admin_browser.get(f"{PROVIDER_KEYS}/{key.id}/change/").content.decode()
    assert "sk-console-secret-5555" not in detail
    assert key.secret_encrypted not in detail
    assert "…5555" in detail


def test_the_admin_console_rotates_a_provider_key_when_a_new_secret_is_given(admin_browser, organization):
    key = create_provider_key(organization, secret="sk-old-secret-1111")
    form = provider_key_form(organization, secret="sk-new-secret-2222", weight="4")
    del form["organization"]

    response = admin_browser.post(f"{PROVIDER_KEYS}/{key.id}/change/", form)

    assert response.status_code == 302, response.content.decode()
    key.refresh_from_db()
    assert key.secret() == "sk-new-secret-2222"
    assert key.rotated_at is not None
    assert key.weight == 4


def test_the_admin_console_rotates_a_key_with_a_base_url_and_keeps_the_address(admin_browser, organization):
    key = create_provider_key(organization, secret="sk-old-secret-1111", base_url="https://8.8.8.8/v1")
    form = provider_key_form(organization, secret="sk-new-secret-2222", base_url="https://8.8.8.8/v1")
    del form["organization"]

    response = admin_browser.post(f"{PROVIDER_KEYS}/{key.id}/change/", form)

    assert response.status_code == 302, response.content.decode()
    key.refresh_from_db()
    assert (key.base_url, key.secret()) == ("https://8.8.8.8/v1", "sk-new-secret-2222")
    assert key.rotated_at is not None


def test_the_admin_console_adds_a_disabled_key_when_the_box_is_unticked(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    form = provider_key_form(organization)
    del form["is_active"]

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post(f"{PROVIDER_KEYS}/add/", form)

    assert response.status_code == 302, response.content.decode()
    key = ProviderKey.objects.get()
    assert not key.is_active and key.secret() == "sk-console-secret-5555"


def test_the_admin_console_cannot_move_a_provider_key_to_another_organization(
    admin_browser, organization, outsider
):
    key = create_provider_key(organization)
    form = provider_key_form(outsider.organization, secret="")

    admin_browser.post(f"{PROVIDER_KEYS}/{key.id}/change/", form)

    key.refresh_from_db()
    assert key.organization == organization


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"provider": "openai_compatible", "base_url": "http://169.254.169.254/"}, "never allowed"),
        ({"provider": "openai_compatible"}, "A base URL is required"),
        ({"provider": "azure_openai", "base_url": "https://8.8.8.8"}, "api_version"),
        ({"secret": ""}, "needs its secret"),
        ({"secret": "abc"}, "at least 4 characters"),
        ({"weight": "-1"}, "greater than or equal to 0"),
    ],
)
def test_the_admin_console_refuses_a_provider_key_the_api_would_refuse(
    admin_browser, organization, overrides, message
):
    response = admin_browser.post(f"{PROVIDER_KEYS}/add/", provider_key_form(organization, **overrides))

    assert response.status_code == 200
    assert message in response.content.decode()
    assert not ProviderKey.objects.exists()


def test_deleting_a_provider_key_in_the_admin_console_bumps_the_generation(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    one, many = create_provider_key(organization), create_provider_key(organization)

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(f"{PROVIDER_KEYS}/{one.id}/delete/", {"post": "yes"})
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(
            f"{PROVIDER_KEYS}/", {"action": "delete_selected", "_selected_action": [many.id], "post": "yes"}
        )

    assert not ProviderKey.objects.exists()


# --- catalog -----------------------------------------------------------------------------------


def test_deleting_catalog_entries_in_the_admin_console_bumps_the_generation(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    model_alias = ModelAliasFactory(organization=organization)
    price = ModelPriceFactory(organization=organization)

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(f"/admin/catalog/modelalias/{model_alias.id}/delete/", {"post": "yes"})
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(f"/admin/catalog/modelprice/{price.id}/delete/", {"post": "yes"})

    assert not ModelAlias.objects.exists()
    assert not ModelPrice.objects.exists()


def test_the_admin_console_refuses_to_delete_an_alias_another_falls_back_to(admin_browser, organization):
    cheap = ModelAliasFactory(organization=organization, alias="cheap")
    DeploymentFactory(alias=ModelAliasFactory(organization=organization, alias="smart", fallbacks=["cheap"]))

    response = admin_browser.post(f"/admin/catalog/modelalias/{cheap.id}/delete/", {"post": "yes"})

    assert response.status_code == 200
    assert "smart" in response.content.decode()
    assert ModelAlias.objects.filter(pk=cheap.pk).exists()


def test_a_price_version_is_read_only_in_the_admin_console(admin_browser, organization):
    price = ModelPriceFactory(organization=organization)

    admin_browser.post(
        f"/admin/catalog/modelprice/{price.id}/change/",
        {
            "organization": organization.id,
            "provider": "openai",
            "model": "gpt-4o-mini",
            "input_per_mtok": "9",
            "output_per_mtok": "9",
            "effective_from_0": "2025-01-01",
            "effective_from_1": "00:00:00",
        },
    )

    price.refresh_from_db()
    assert str(price.input_per_mtok) == "0.150000"


def test_the_admin_console_refuses_a_fallback_the_organization_does_not_have(
    admin_browser, organization, outsider
):
    ModelAliasFactory(organization=outsider.organization, alias="theirs")
    form = {
        "organization": organization.id,
        "alias": "fast",
        "description": "",
        "fallbacks": '["theirs"]',
        "is_active": "on",
        "deployments-TOTAL_FORMS": "1",
        "deployments-INITIAL_FORMS": "0",
        "deployments-0-provider": "openai",
        "deployments-0-upstream_model": "gpt-4o-mini",
        "deployments-0-priority": "0",
    }

    response = admin_browser.post("/admin/catalog/modelalias/add/", form)

    assert response.status_code == 200
    assert "No such model alias: theirs." in response.content.decode()
    assert not ModelAlias.objects.filter(organization=organization).exists()

    form["fallbacks"] = "[]"
    assert admin_browser.post("/admin/catalog/modelalias/add/", form).status_code == 302
    assert ModelAlias.objects.get(organization=organization).deployments.count() == 1


def test_the_admin_console_writes_an_alias_and_its_deployments_through_the_service(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    form = {
        "organization": organization.id,
        "alias": "fast",
        "description": "",
        "fallbacks": "[]",
        "is_active": "on",
        "deployments-TOTAL_FORMS": "1",
        "deployments-INITIAL_FORMS": "0",
        "deployments-0-provider": "openai",
        "deployments-0-upstream_model": "gpt-4o-mini",
        "deployments-0-priority": "0",
    }
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert admin_browser.post("/admin/catalog/modelalias/add/", form).status_code == 302
    fast = ModelAlias.objects.get(organization=organization, alias="fast")
    change = f"/admin/catalog/modelalias/{fast.id}/change/"

    # Only an inline deployment changes: the alias's service write still tells the workers.
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_post(
            admin_browser, change, fallbacks="[]", **{"deployments-0-upstream_model": "gpt-4o"}
        )

    assert response.status_code == 302, form_errors(response)
    assert [d.upstream_model for d in fast.deployments.all()] == ["gpt-4o"]


def test_the_bulk_delete_action_deletes_an_alias_with_the_aliases_falling_back_to_it(
    admin_browser, organization, outsider, django_capture_on_commit_callbacks
):
    cheap = ModelAliasFactory(organization=organization, alias="cheap")
    smart = ModelAliasFactory(organization=organization, alias="smart", fallbacks=["cheap"])
    theirs = ModelAliasFactory(organization=outsider.organization, alias="cheap")
    ModelAliasFactory(organization=outsider.organization, alias="smart", fallbacks=["cheap"])
    action = {"action": "delete_selected", "_selected_action": [cheap.id, smart.id], "post": "yes"}

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post("/admin/catalog/modelalias/", action)

    assert response.status_code == 302
    assert not ModelAlias.objects.filter(organization=organization).exists()
    # The outsider's "smart" still falls back to its own "cheap", which the batch never touched.
    assert ModelAlias.objects.filter(pk=theirs.pk).exists()


def test_the_bulk_delete_action_refuses_an_alias_one_left_behind_falls_back_to_and_deletes_none(
    admin_browser, organization
):
    cheap = ModelAliasFactory(organization=organization, alias="cheap")
    other = ModelAliasFactory(organization=organization, alias="other")
    ModelAliasFactory(organization=organization, alias="smart", fallbacks=["cheap"])
    action = {"action": "delete_selected", "_selected_action": [cheap.id, other.id], "post": "yes"}

    response = admin_browser.post("/admin/catalog/modelalias/", action)

    assert response.status_code == 200  # the confirmation page, listing what stands in the way
    assert "smart (falls back to cheap)" in response.content.decode()
    assert ModelAlias.objects.filter(organization=organization).count() == 3


def test_the_admin_console_refuses_to_rename_an_alias_to_a_taken_name(admin_browser, organization):
    ModelAliasFactory(organization=organization, alias="taken")
    mine = ModelAliasFactory(organization=organization, alias="mine")
    form = {
        "alias": "taken",
        "description": "",
        "fallbacks": "[]",
        "is_active": "on",
        "deployments-TOTAL_FORMS": "0",
        "deployments-INITIAL_FORMS": "0",
    }

    response = admin_browser.post(f"/admin/catalog/modelalias/{mine.id}/change/", form)

    assert response.status_code == 200
    # The service's 409, shown on the field: the message the API and the console give.
    assert "The model alias &#x27;taken&#x27; exists already." in response.content.decode()
    mine.refresh_from_db()
    assert mine.alias == "mine"


def test_the_admin_console_refuses_an_alias_without_a_deployment_as_the_api_does(admin_browser, organization):
    form = {
        "organization": organization.id,
        "alias": "fast",
        "description": "",
        "fallbacks": "",
        "is_active": "on",
        "deployments-TOTAL_FORMS": "1",
        "deployments-INITIAL_FORMS": "0",
        "deployments-0-provider": "",
        "deployments-0-upstream_model": "",
        "deployments-0-priority": "0",
    }

    response = admin_browser.post("/admin/catalog/modelalias/add/", form, follow=True)

    assert "An alias needs at least one deployment." in response.content.decode()
    assert not ModelAlias.objects.filter(organization=organization).exists()


def test_the_admin_console_replaces_the_deployments_and_refuses_removing_the_last(
    admin_browser, organization
):
    fast = ModelAliasFactory(organization=organization, alias="fast")
    first = DeploymentFactory(alias=fast, upstream_model="gpt-4o-mini")
    change = f"/admin/catalog/modelalias/{fast.id}/change/"

    response = admin_post(
        admin_browser,
        change,
        fallbacks="[]",
        **{"deployments-1-provider": "anthropic", "deployments-1-upstream_model": "claude-3-5-haiku"},
    )

    assert response.status_code == 302, form_errors(response)
    assert [(d.provider, d.upstream_model) for d in fast.deployments.all()] == [
        ("openai", "gpt-4o-mini"),
        ("anthropic", "claude-3-5-haiku"),
    ]
    replaced = list(fast.deployments.all())  # replaced whole, as the API's PATCH replaces them
    assert first not in replaced
    response = admin_post(
        admin_browser,
        change,
        follow=True,
        fallbacks="[]",
        **{"deployments-0-DELETE": "on", "deployments-1-DELETE": "on"},
    )
    assert "An alias needs at least one deployment." in response.content.decode()
    assert list(fast.deployments.all()) == replaced


def test_the_admin_console_refuses_to_rename_an_alias_others_fall_back_to(admin_browser, organization):
    cheap = ModelAliasFactory(organization=organization, alias="cheap")
    DeploymentFactory(alias=cheap)
    ModelAliasFactory(organization=organization, alias="smart", fallbacks=["cheap"])

    response = admin_post(admin_browser, f"/admin/catalog/modelalias/{cheap.id}/change/", alias="cheaper")

    assert response.status_code == 200
    assert "remove it from their fallbacks first" in response.content.decode()
    cheap.refresh_from_db()
    assert cheap.alias == "cheap"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("input_per_mtok", "-1", "A decimal string of at most 6 decimal places"),
        ("output_per_mtok", "cheap", "A decimal string of at most 6 decimal places"),
        ("cached_input_per_mtok", "0.0000001", "A decimal string of at most 6 decimal places"),
    ],
)
def test_the_admin_console_refuses_a_price_the_api_refuses_on_its_field(
    admin_browser, organization, field, value, message
):
    form = {
        "organization": organization.id,
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_per_mtok": "0.12",
        "output_per_mtok": "0.48",
        "cached_input_per_mtok": "",
        "reasoning_per_mtok": "",
        "effective_from_0": "2026-01-01",
        "effective_from_1": "00:00:00",
        field: value,
    }

    response = admin_browser.post("/admin/catalog/modelprice/add/", form)

    assert response.status_code == 200
    assert message in str(form_errors(response)[field])
    assert not ModelPrice.objects.exists()


def test_the_admin_console_adds_a_price_version_through_the_service(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    form = {
        "organization": organization.id,
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_per_mtok": "0.12",
        "output_per_mtok": "0.48",
        "cached_input_per_mtok": "0.06",
        "reasoning_per_mtok": "",
        "effective_from_0": "2026-01-01",
        "effective_from_1": "00:00:00",
    }

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post("/admin/catalog/modelprice/add/", form)

    assert response.status_code == 302, form_errors(response)
    price = ModelPrice.objects.get(organization=organization)
    assert (price.input_per_mtok, price.cached_input_per_mtok, price.reasoning_per_mtok) == (
        Decimal("0.12"),
        Decimal("0.06"),
        None,
    )
    response = admin_browser.post("/admin/catalog/modelprice/add/", form)
    assert response.status_code == 200 and "already exists" in str(form_errors(response))
    assert ModelPrice.objects.count() == 1


# --- organizations and teams: every write through the services ---------------------------------

ORGANIZATIONS = "/admin/organizations/organization"
TEAMS = "/admin/teams/team"


def test_the_admin_console_creates_an_organization_with_its_owner(
    admin_browser, django_capture_on_commit_callbacks
):
    owner = UserFactory()
    response = admin_browser.post(
        f"{ORGANIZATIONS}/add/",
        {
            "name": "Made in the console",
            "owner": owner.id,
            "plan": "growth",
            "log_bodies": "metadata",
            "log_retention_days": "90",
            "allowed_data_regions": "eu, us eu",
        },
    )

    assert response.status_code == 302, form_errors(response)
    organization = Organization.objects.get(name="Made in the console")
    assert organization.slug == "made-in-the-console"
    assert (organization.log_bodies, organization.log_retention_days) == ("metadata", 90)
    assert organization.allowed_data_regions == ["eu", "us"]
    assert Membership.objects.get(organization=organization).user == owner
    assert Membership.objects.get(organization=organization).role == "owner"


def test_an_admin_change_of_an_organization_bumps_the_generation(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    url = f"{ORGANIZATIONS}/{organization.id}/change/"

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_post(admin_browser, url, log_bodies="full", allowed_data_regions="eu")

    assert response.status_code == 302, form_errors(response)
    organization.refresh_from_db()
    assert (organization.log_bodies, organization.allowed_data_regions) == ("full", ["eu"])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"allowed_data_regions": "EU!"}, "not a data region"),
        ({"allowed_data_regions": '["eu"]'}, "not a data region"),
        ({"log_retention_days": "0"}, "greater than or equal to 1"),
    ],
)
def test_the_admin_console_refuses_organization_settings_the_api_would_refuse(
    admin_browser, organization, changes, message
):
    response = admin_post(admin_browser, f"{ORGANIZATIONS}/{organization.id}/change/", **changes)

    assert response.status_code == 200
    assert message in response.content.decode()
    organization.refresh_from_db()
    assert organization.allowed_data_regions == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"cache_embedding_model": "their-embeddings"}, "No such model alias in this organization"),
        ({"cache_semantic_enabled": "on"}, "The semantic cache needs an embeddings model alias."),
    ],
)
def test_the_admin_console_refuses_an_embeddings_model_the_organization_does_not_have(
    admin_browser, organization, outsider, changes, message
):
    ModelAliasFactory(organization=outsider.organization, alias="their-embeddings")

    response = admin_post(admin_browser, f"{ORGANIZATIONS}/{organization.id}/change/", **changes)

    assert response.status_code == 200
    assert message in str(form_errors(response).get("cache_embedding_model")), form_errors(response)
    organization.refresh_from_db()
    assert (organization.cache_embedding_model, organization.cache_semantic_enabled) == ("", False)


def test_the_admin_console_sets_an_embeddings_model_of_the_organizations_catalog(admin_browser, organization):
    ModelAliasFactory(organization=organization, alias="embedder")
    url = f"{ORGANIZATIONS}/{organization.id}/change/"

    response = admin_post(admin_browser, url, cache_embedding_model="embedder", cache_semantic_enabled="on")

    assert response.status_code == 302, form_errors(response)
    organization.refresh_from_db()
    assert (organization.cache_embedding_model, organization.cache_semantic_enabled) == ("embedder", True)


def test_the_admin_console_creates_and_changes_a_team_through_the_service(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post(
            f"{TEAMS}/add/",
            {
                "organization": organization.id,
                "name": "Research",
                "slug": "research",
                "allowed_data_regions": "eu",
            },
        )
    assert response.status_code == 302, form_errors(response)
    team = Team.objects.get(organization=organization)
    assert team.allowed_data_regions == ["eu"]

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_post(admin_browser, f"{TEAMS}/{team.id}/change/", allowed_data_regions="us")
    assert response.status_code == 302, form_errors(response)
    team.refresh_from_db()
    assert team.allowed_data_regions == ["us"]


def test_the_admin_console_cannot_move_a_team_to_another_organization(admin_browser, team, outsider):
    admin_post(admin_browser, f"{TEAMS}/{team.id}/change/", organization=outsider.organization.id)

    team.refresh_from_db()
    assert team.organization_id != outsider.organization.id


def test_the_admin_console_shows_a_slug_taken_by_another_team_as_an_error(admin_browser, organization):
    TeamFactory(organization=organization, slug="taken")
    mine = TeamFactory(organization=organization, slug="mine")

    response = admin_post(admin_browser, f"{TEAMS}/{mine.id}/change/", slug="taken", follow=True)

    assert response.status_code == 200
    assert "A team with the slug &#x27;taken&#x27; exists already." in response.content.decode()
    mine.refresh_from_db()
    assert mine.slug == "mine"


def test_the_admin_console_refuses_to_delete_a_team_with_active_keys(admin_browser, team):
    key, _ = create_api_key(team.organization, team=team)

    response = admin_browser.post(f"{TEAMS}/{team.id}/delete/", {"post": "yes"}, follow=True)

    assert response.status_code == 200
    assert "This team still has active API keys bound to it; revoke them first." in response.content.decode()
    assert Team.objects.filter(pk=team.pk).exists()
    key.refresh_from_db()
    assert key.team_id == team.id


def test_the_bulk_delete_action_refuses_teams_with_active_keys_and_deletes_none(admin_browser, organization):
    free, bound = TeamFactory(organization=organization), TeamFactory(organization=organization)
    key, _ = create_api_key(organization, team=bound)

    response = admin_browser.post(
        f"{TEAMS}/",
        {"action": "delete_selected", "_selected_action": [free.id, bound.id], "post": "yes"},
        follow=True,
    )

    assert response.status_code == 200
    assert "revoke them first" in response.content.decode()
    assert Team.objects.filter(organization=organization).count() == 2
    key.refresh_from_db()
    assert key.team_id == bound.id


def test_deleting_teams_in_the_admin_console_bumps_the_generation(
    admin_browser, organization, django_capture_on_commit_callbacks
):
    one, many = TeamFactory(organization=organization), TeamFactory(organization=organization)
    revoked, _ = create_api_key(organization, team=many)
    revoked.is_active = False
    revoked.save()

    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post(f"{TEAMS}/{one.id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        admin_browser.post(
            f"{TEAMS}/", {"action": "delete_selected", "_selected_action": [many.id], "post": "yes"}
        )

    assert not Team.objects.exists()


def test_deleting_an_organization_in_the_admin_console_bumps_its_generation(
    admin_browser, organization, outsider, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = admin_browser.post(f"{ORGANIZATIONS}/{organization.id}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert list(Organization.objects.all()) == [outsider.organization]


# --- admin actions need the change permission --------------------------------------------------


def staff_browser(*codenames: str) -> Client:
    user = UserFactory(is_staff=True)
    user.user_permissions.set(AuthPermission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_a_staff_user_who_may_only_view_keys_cannot_revoke_them(api_key):
    key, _ = api_key
    browser = staff_browser("view_apikey")
    assert browser.get("/admin/keys/apikey/").status_code == 200

    browser.post("/admin/keys/apikey/", {"action": "revoke_selected", "_selected_action": [key.id]})

    key.refresh_from_db()
    assert key.is_active


def test_a_staff_user_who_may_change_keys_can_revoke_them(api_key):
    key, _ = api_key
    browser = staff_browser("view_apikey", "change_apikey")

    browser.post("/admin/keys/apikey/", {"action": "revoke_selected", "_selected_action": [key.id]})

    key.refresh_from_db()
    assert not key.is_active


MEMBERSHIPS = "/admin/teams/teammembership"


def test_the_admin_console_adds_and_removes_team_members_through_the_services(
    admin_browser, organization, owner, outsider
):
    team = TeamFactory(organization=organization)
    response = admin_browser.post(f"{MEMBERSHIPS}/add/", {"team": team.id, "user": owner.user.id})
    assert response.status_code == 302, form_errors(response)
    membership = TeamMembership.objects.get(team=team)
    assert membership.user == owner.user

    # A user of another organization is refused with the service's words, and nothing is written.
    refused = admin_browser.post(
        f"{MEMBERSHIPS}/add/", {"team": team.id, "user": outsider.user.id}, follow=True
    )
    assert "No such user in this organization." in refused.content.decode()
    assert TeamMembership.objects.filter(team=team).count() == 1

    response = admin_browser.post(f"{MEMBERSHIPS}/{membership.id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not TeamMembership.objects.exists()


ORGANIZATION_MEMBERSHIPS = "/admin/organizations/membership"


def test_the_admin_console_changes_organization_members_through_the_services(
    admin_browser, organization, owner
):
    person = UserFactory(email="newcomer@example.com")
    # Nobody is added without their consent: no add page; staff invite, as an owner does.
    response = admin_browser.post(
        f"{ORGANIZATION_MEMBERSHIPS}/add/",
        {"organization": organization.id, "user": person.id, "role": "admin"},
    )
    assert response.status_code == 403
    response = admin_browser.post(
        "/admin/organizations/invitation/add/",
        {"organization": organization.id, "email": person.email, "role": "admin"},
        follow=True,
    )
    assert response.status_code == 200 and "/console/invitations/" in response.content.decode()
    invitation = Invitation.objects.get(organization=organization, email=person.email)
    assert invitation.status == "pending" and invitation.role == "admin"
    assert not Membership.objects.filter(organization=organization, user=person).exists()
    added = invitation_accept(invitation=invitation, user=person)
    assert added.role == "admin"

    # The last owner can be neither demoted nor removed: the service refuses, nothing changes.
    refused = admin_post(
        admin_browser, f"{ORGANIZATION_MEMBERSHIPS}/{owner.id}/change/", role="member", follow=True
    )
    owner.refresh_from_db()
    assert owner.role == "owner" and "keeps at least one owner" in refused.content.decode()
    admin_browser.post(f"{ORGANIZATION_MEMBERSHIPS}/{owner.id}/delete/", {"post": "yes"}, follow=True)
    assert Membership.objects.filter(pk=owner.pk).exists()

    # A removed member leaves the organization's teams too.
    team = TeamFactory(organization=organization)
    TeamMembership.objects.create(team=team, user=person)
    response = admin_browser.post(f"{ORGANIZATION_MEMBERSHIPS}/{added.id}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=added.pk).exists()
    assert not TeamMembership.objects.filter(team=team, user=person).exists()


def test_the_organization_page_lists_its_members_read_only(admin_browser, organization, owner):
    page = admin_browser.get(f"/admin/organizations/organization/{organization.id}/change/")
    assert page.status_code == 200
    formset = page.context["inline_admin_formsets"][0].formset
    assert formset.max_num == 0 or not page.context["inline_admin_formsets"][0].has_add_permission
    assert owner.user.email in page.content.decode()
