"""The console's models and prices pages: aliases with deployments, fallbacks and current prices;
create, edit, delete; price versions; roles, tenancy, CSRF and refused input."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.catalog.models import ModelAlias, ModelPrice
from tests.console.conftest import post_form
from tests.factories import DeploymentFactory, ModelAliasFactory, ModelPriceFactory
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

LIST = "/console/models/"
PRICES = "/console/models/prices/"


def page_of(model_alias: ModelAlias) -> str:
    return f"{LIST}{model_alias.id}/"


def alias_form(alias: str, deployments, *, fallbacks: str = "", active: bool = True, description: str = ""):
    """The alias form as a browser posts it: parallel deployment rows, blank rows included."""
    rows = [*deployments, ("openai", "", "")]
    return {
        "alias": alias,
        "description": description,
        "deployment_provider": [row[0] for row in rows],
        "deployment_model": [row[1] for row in rows],
        "deployment_priority": [row[2] for row in rows],
        "fallbacks": fallbacks,
        "is_active": ["false", "true"] if active else ["false"],
    }


def test_a_member_reads_the_catalog_with_current_prices_and_never_another_organizations(
    console_for, organization, outsider
):
    fast = ModelAliasFactory(organization=organization, alias="fast", fallbacks=[])
    DeploymentFactory(alias=fast, provider="openai", upstream_model="gpt-4o-mini", priority=0)
    DeploymentFactory(alias=fast, provider="openai_compatible", upstream_model="llama-3", priority=1)
    ModelPriceFactory(
        organization=organization,
        model="gpt-4o-mini",
        input_per_mtok=Decimal("0.12"),
        output_per_mtok=Decimal("0.48"),
        effective_from=datetime(2025, 1, 1, tzinfo=UTC),
    )
    DeploymentFactory(alias=ModelAliasFactory(organization=outsider.organization, alias="their-model"))
    client = console_for(organization, "member")
    page = client.get(LIST).content.decode()
    assert "fast" in page and "openai/gpt-4o-mini" in page and "$0.12 · $0.48" in page
    assert "openai_compatible/llama-3" in page and "no price: costs 0" in page
    assert "their-model" not in page
    assert "Add a model alias" not in page
    detail = client.get(page_of(fast)).content.decode()
    assert "llama-3" in detail and "<form" not in detail.split("</header>")[1]


def test_the_list_price_applies_where_the_organization_set_none(console_for, organization):
    alias = ModelAliasFactory(organization=organization, alias="smart")
    DeploymentFactory(alias=alias, provider="openai", upstream_model="gpt-4o-2024-08-06")
    client = console_for(organization, "member")
    assert "$2.5 · $10 (list)" in client.get(LIST).content.decode()


def test_an_admin_creates_an_alias_with_deployments_and_fallbacks(
    console_for, organization, django_capture_on_commit_callbacks
):
    ModelAliasFactory(organization=organization, alias="cheap")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            f"{LIST}new",
            f"{LIST}new",
            alias_form(
                "fast",
                [("azure_openai", "mini-eastus", ""), ("openai", "gpt-4o-mini", "5")],
                fallbacks="cheap",
                description="Quick answers",
            ),
        )
    assert response.status_code == 302
    fast = ModelAlias.objects.get(organization=organization, alias="fast")
    assert response["Location"] == page_of(fast)
    assert [(d.provider, d.upstream_model, d.priority) for d in fast.deployments.all()] == [
        ("azure_openai", "mini-eastus", 0),
        ("openai", "gpt-4o-mini", 5),
    ]
    assert (fast.fallbacks, fast.description, fast.is_active) == (["cheap"], "Quick answers", True)


def test_a_refused_alias_says_why_and_creates_nothing(console_for, organization, outsider):
    ModelAliasFactory(organization=outsider.organization, alias="theirs")
    client = console_for(organization, "admin")
    response = post_form(client, f"{LIST}new", f"{LIST}new", alias_form("bad/name", []))
    assert response.status_code == 400
    page = response.content.decode()
    assert "a &#x27;/&#x27; means provider/model" in page and "at least one deployment" in page
    # Another organization's alias reads like one that does not exist.
    response = post_form(
        client, f"{LIST}new", f"{LIST}new", alias_form("mine", [("openai", "gpt-4o", "")], fallbacks="theirs")
    )
    assert response.status_code == 400
    assert "No such model alias: theirs." in response.content.decode()
    response = post_form(client, f"{LIST}new", f"{LIST}new", alias_form("mine", [("nowhere", "gpt-4o", "x")]))
    assert response.status_code == 400
    page = response.content.decode()
    assert "deployments[0].provider" in page and "is not a valid choice" in page
    assert "deployments[0].priority" in page
    assert not ModelAlias.objects.filter(organization=organization).exists()


def test_a_taken_alias_is_a_conflict(console_for, organization):
    ModelAliasFactory(organization=organization, alias="fast")
    client = console_for(organization, "admin")
    response = post_form(client, f"{LIST}new", f"{LIST}new", alias_form("fast", [("openai", "gpt-4o", "")]))
    assert response.status_code == 409
    assert "exists already" in response.content.decode()


def test_an_admin_edits_an_alias_replacing_its_deployments(
    console_for, organization, django_capture_on_commit_callbacks
):
    alias = ModelAliasFactory(organization=organization, alias="fast")
    DeploymentFactory(alias=alias, provider="openai", upstream_model="gpt-4o-mini")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            page_of(alias),
            f"{page_of(alias)}edit",
            alias_form("quick", [("anthropic", "claude-3-5-haiku-latest", "")], active=False),
        )
    assert response.status_code == 302
    alias.refresh_from_db()
    assert (alias.alias, alias.is_active) == ("quick", False)
    assert [(d.provider, d.upstream_model) for d in alias.deployments.all()] == [
        ("anthropic", "claude-3-5-haiku-latest")
    ]


def test_an_alias_others_fall_back_to_cannot_be_renamed_or_deleted(console_for, organization):
    cheap = ModelAliasFactory(organization=organization, alias="cheap")
    DeploymentFactory(alias=cheap)
    ModelAliasFactory(organization=organization, alias="fast", fallbacks=["cheap"])
    client = console_for(organization, "admin")
    response = post_form(
        client,
        page_of(cheap),
        f"{page_of(cheap)}edit",
        alias_form("cheaper", [("openai", "gpt-4o-mini", "")]),
    )
    assert response.status_code == 409
    assert "remove it from their fallbacks first" in response.content.decode()
    response = post_form(client, page_of(cheap), f"{page_of(cheap)}delete", {})
    assert response.status_code == 409
    assert "fall back to it (fast)" in response.content.decode()
    cheap.refresh_from_db()
    assert cheap.alias == "cheap"


def test_an_admin_deletes_an_alias(console_for, organization, django_capture_on_commit_callbacks):
    alias = ModelAliasFactory(organization=organization, alias="old")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page_of(alias), f"{page_of(alias)}delete", {})
    assert response.status_code == 302 and response["Location"] == LIST
    assert not ModelAlias.objects.filter(pk=alias.pk).exists()


def test_a_member_reads_the_price_versions_and_the_list_prices(console_for, organization, outsider):
    ModelPriceFactory(organization=organization, model="gpt-4o-mini", input_per_mtok=Decimal("0.11"))
    ModelPriceFactory(organization=outsider.organization, model="their-priced-model")
    client = console_for(organization, "member")
    page = client.get(PRICES).content.decode()
    assert "$0.11" in page and "in force" in page
    assert "claude-3-5-haiku" in page  # the shipped table
    assert "their-priced-model" not in page
    assert "Add a version" not in page


def test_an_admin_adds_a_price_version(console_for, organization, django_capture_on_commit_callbacks):
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            PRICES,
            f"{PRICES}new",
            {
                "provider": "openai",
                "model": "gpt-4o-mini",
                "input_per_mtok": "0.12",
                "output_per_mtok": "0.48",
                "cached_input_per_mtok": "0.06",
                "reasoning_per_mtok": "",
                "effective_from": "2026-01-01T00:00",
            },
        )
    assert response.status_code == 302
    price = ModelPrice.objects.get(organization=organization)
    assert (price.input_per_mtok, price.cached_input_per_mtok, price.reasoning_per_mtok) == (
        Decimal("0.12"),
        Decimal("0.06"),
        None,
    )
    assert price.effective_from == datetime(2026, 1, 1, tzinfo=UTC)
    # The same effective_from again is a conflict: a version is never edited.
    response = post_form(
        client,
        PRICES,
        f"{PRICES}new",
        {
            "provider": "openai",
            "model": "gpt-4o-mini",
            "input_per_mtok": "1",
            "output_per_mtok": "1",
            "effective_from": "2026-01-01T00:00",
        },
    )
    assert response.status_code == 409
    assert ModelPrice.objects.filter(organization=organization).count() == 1


def test_a_refused_price_says_why_and_saves_nothing(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(
        client,
        PRICES,
        f"{PRICES}new",
        {"provider": "openai", "model": "m", "input_per_mtok": "-1", "output_per_mtok": "0.1234567"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "input_per_mtok" in page and "output_per_mtok" in page and "effective_from" in page
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("models/new", alias_form("sneaky", [("openai", "gpt-4o", "")])),
        ("models/{id}/edit", alias_form("renamed", [("openai", "gpt-4o", "")])),
        ("models/{id}/delete", {}),
        (
            "models/prices/new",
            {
                "provider": "openai",
                "model": "m",
                "input_per_mtok": "1",
                "output_per_mtok": "1",
                "effective_from": "2026-01-01T00:00",
            },
        ),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    alias = ModelAliasFactory(organization=organization, alias="kept")
    client = console_for(organization, "member")
    assert client.get(f"{LIST}new").status_code == 403
    response = post_form(client, LIST, "/console/" + path.format(id=alias.id), data)
    assert response.status_code == 403
    alias.refresh_from_db()
    assert alias.alias == "kept"
    assert ModelAlias.objects.filter(organization=organization).count() == 1
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize("suffix", ["", "edit", "delete"])
def test_another_organizations_alias_answers_404(console_for, organization, outsider, suffix):
    theirs = ModelAliasFactory(organization=outsider.organization, alias="theirs")
    client = console_for(organization, "owner")
    path = f"{page_of(theirs)}{suffix}"
    data = alias_form("mine", [("openai", "gpt-4o", "")])
    response = client.get(path) if not suffix else post_form(client, LIST, path, data)
    assert response.status_code == 404
    assert ModelAlias.objects.filter(pk=theirs.pk, alias="theirs").exists()


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    alias = ModelAliasFactory(organization=organization, alias="kept")
    client = console_for(organization, "owner")
    assert client.post(f"{page_of(alias)}delete", {}).status_code == 403
    assert ModelAlias.objects.filter(pk=alias.pk).exists()
