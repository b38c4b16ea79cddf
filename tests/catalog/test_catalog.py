"""/api/v1/models and /api/v1/model-prices: the organization's model catalog and its prices."""

import uuid
from decimal import Decimal

import pytest

from apps.catalog import services
from apps.catalog.models import ModelAlias, ModelPrice
from apps.catalog.pricing import SHIPPED_PRICES
from tests.factories import DeploymentFactory, ModelAliasFactory, ModelPriceFactory
from tests.management.errors import assert_error
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

MODELS = "/api/v1/models"
PRICES = "/api/v1/model-prices"
ALIAS_FIELDS = {
    "id",
    "alias",
    "description",
    "deployments",
    "fallbacks",
    "is_active",
    "created_at",
    "updated_at",
}
PRICE_FIELDS = {
    "id",
    "provider",
    "model",
    "input_per_mtok",
    "cached_input_per_mtok",
    "output_per_mtok",
    "reasoning_per_mtok",
    "effective_from",
    "created_at",
}
OPENAI_MINI = {"provider": "openai", "upstream_model": "gpt-4o-mini"}
AZURE_MINI = {"provider": "azure_openai", "upstream_model": "mini-eastus"}


def new_alias(**overrides) -> dict:
    return {"alias": "fast", "deployments": [OPENAI_MINI], **overrides}


def aliases(client) -> list[str]:
    response = client.get(MODELS)
    assert response.status_code == 200
    return [model["alias"] for model in response.json()["results"]]


def deployments(body: dict) -> list[tuple[str, str]]:
    return [(d["provider"], d["upstream_model"]) for d in body["deployments"]]


def assert_invalid_field(response, field: str) -> dict:
    error = assert_error(response, 400, "validation_error")
    named = [name for name in error["fields"] if name == field or name.startswith((f"{field}.", f"{field}["))]
    assert named, error["fields"]
    return error


@pytest.fixture
def fallback(organization) -> ModelAlias:
    model_alias = ModelAliasFactory(organization=organization, alias="cheap")
    DeploymentFactory(alias=model_alias, provider="anthropic", upstream_model="claude-3-5-haiku")
    return model_alias


@pytest.fixture
def model_alias(organization) -> ModelAlias:
    model_alias = ModelAliasFactory(organization=organization, alias="smart")
    DeploymentFactory(alias=model_alias, upstream_model="gpt-4o")
    return model_alias


@pytest.fixture
def outsiders_alias(outsider) -> ModelAlias:
    model_alias = ModelAliasFactory(organization=outsider.organization, alias="theirs")
    DeploymentFactory(alias=model_alias)
    return model_alias


# --- aliases: create ---------------------------------------------------------------------------


def test_it_creates_an_alias_with_deployments_and_fallbacks(session_client, fallback):
    request = new_alias(
        description="Quick answers", deployments=[AZURE_MINI, OPENAI_MINI], fallbacks=["cheap"]
    )

    response = session_client.post(MODELS, request, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == ALIAS_FIELDS
    uuid.UUID(body["id"])
    assert body["alias"] == "fast"
    assert body["description"] == "Quick answers"
    assert deployments(body) == [("azure_openai", "mini-eastus"), ("openai", "gpt-4o-mini")]
    assert [d["priority"] for d in body["deployments"]] == [0, 1]
    assert body["fallbacks"] == ["cheap"]
    assert body["is_active"] is True
    assert body["created_at"].endswith("Z")
    assert session_client.get(f"{MODELS}/{body['id']}").json() == body


def test_deployments_are_listed_in_priority_order(session_client):
    request = new_alias(deployments=[{**OPENAI_MINI, "priority": 5}, {**AZURE_MINI, "priority": 1}])

    body = session_client.post(MODELS, request, format="json").json()

    assert deployments(body) == [("azure_openai", "mini-eastus"), ("openai", "gpt-4o-mini")]


def test_it_creates_an_inactive_alias(session_client):
    response = session_client.post(MODELS, new_alias(is_active=False), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["is_active"] is False


@pytest.mark.parametrize("name", ["gpt-4o-mini", "llama3.1:8b", "team@fast", "A_1"])
def test_an_alias_may_hold_letters_digits_and_a_few_marks(session_client, name):
    assert session_client.post(MODELS, new_alias(alias=name), format="json").status_code == 201


def test_it_refuses_a_second_alias_with_the_same_name(session_client, model_alias):
    response = session_client.post(MODELS, new_alias(alias="smart"), format="json")

    error = assert_error(response, 409, "model_alias_taken")
    assert error["type"] == "conflict_error"
    assert aliases(session_client) == ["smart"]


def test_an_alias_used_by_the_outsider_is_still_free_here(session_client, outsiders_alias):
    assert session_client.post(MODELS, new_alias(alias="theirs"), format="json").status_code == 201


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"alias": "openai/gpt-4o"}, "alias"),
        ({"alias": ""}, "alias"),
        ({"alias": "-fast"}, "alias"),
        ({"alias": "has space"}, "alias"),
        ({"alias": 42}, "alias"),
        ({"alias": "x" * 201}, "alias"),
        ({"deployments": []}, "deployments"),
        ({"deployments": None}, "deployments"),
        ({"deployments": "openai/gpt-4o-mini"}, "deployments"),
        ({"deployments": [{"provider": "cohere", "upstream_model": "command"}]}, "deployments"),
        ({"deployments": [{"provider": "openai", "upstream_model": ""}]}, "deployments"),
        ({"deployments": [{"provider": "openai"}]}, "deployments"),
        ({"deployments": [{**OPENAI_MINI, "priority": -1}]}, "deployments"),
        ({"fallbacks": "cheap"}, "fallbacks"),
        ({"fallbacks": ["fast"]}, "fallbacks"),
        ({"fallbacks": ["nowhere"]}, "fallbacks"),
        ({"fallbacks": ["openai/gpt-4o"]}, "fallbacks"),
        ({"description": 5}, "description"),
    ],
)
def test_it_rejects_a_bad_alias_naming_the_field(session_client, overrides, field):
    response = session_client.post(MODELS, new_alias(**overrides), format="json")

    assert_invalid_field(response, field)
    assert aliases(session_client) == []


def test_it_requires_deployments(session_client):
    response = session_client.post(MODELS, {"alias": "fast"}, format="json")

    assert_invalid_field(response, "deployments")


def test_a_deployment_error_names_the_deployment_by_its_index(session_client):
    request = new_alias(deployments=[OPENAI_MINI, {"provider": "cohere", "upstream_model": "command"}])

    error = assert_error(session_client.post(MODELS, request, format="json"), 400, "validation_error")

    assert set(error["fields"]) == {"deployments[1].provider"}


def test_an_alias_cannot_fall_back_to_itself(session_client):
    response = session_client.post(MODELS, new_alias(fallbacks=["fast"]), format="json")

    error = assert_invalid_field(response, "fallbacks")
    assert "itself" in error["message"]


def test_the_outsiders_alias_cannot_be_a_fallback_and_reads_like_an_unknown_one(
    session_client, outsiders_alias
):
    response = session_client.post(MODELS, new_alias(fallbacks=["theirs"]), format="json")

    error = assert_invalid_field(response, "fallbacks")
    assert error["fields"] == {"fallbacks": ["No such model alias: theirs."]}
    assert aliases(session_client) == []


@pytest.mark.parametrize(
    ("fallbacks", "message"), [(["theirs"], "No such model alias: theirs."), (["fast"], "itself")]
)
def test_the_fallbacks_rule_is_the_catalog_services_so_a_shell_write_keeps_it_too(
    organization, outsiders_alias, fallbacks, message
):
    with pytest.raises(services.InvalidFallbacks, match=message):
        services.model_alias_create(
            organization=organization,
            data={"alias": "fast", "deployments": [OPENAI_MINI], "fallbacks": fallbacks},
        )

    assert not ModelAlias.objects.filter(organization=organization).exists()


def test_it_rejects_a_malformed_json_body(session_client):
    assert_error(
        session_client.post(MODELS, data='{"alias": ', content_type="application/json"), 400, "parse_error"
    )


def test_creating_an_alias_bumps_the_configuration_generation(
    session_client, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert session_client.post(MODELS, new_alias(), format="json").status_code == 201


def test_a_refused_alias_does_not_bump_the_generation(
    session_client, organization, model_alias, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        assert session_client.post(MODELS, new_alias(alias="smart"), format="json").status_code == 409


# --- aliases: list, retrieve, change, delete ---------------------------------------------------


def test_the_list_shows_only_the_organizations_aliases(
    session_client, model_alias, fallback, outsiders_alias
):
    response = session_client.get(MODELS)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    assert sorted(aliases(session_client)) == ["cheap", "smart"]
    assert all(set(model) == ALIAS_FIELDS for model in body["results"])
    assert str(outsiders_alias.id) not in response.content.decode()


def test_one_alias_can_be_read_with_its_deployments(session_client, model_alias):
    body = session_client.get(f"{MODELS}/{model_alias.id}").json()

    assert body["alias"] == "smart"
    assert deployments(body) == [("openai", "gpt-4o")]


def test_a_patch_with_deployments_replaces_them(session_client, model_alias):
    request = {"deployments": [AZURE_MINI, {"provider": "anthropic", "upstream_model": "claude-3-5-haiku"}]}

    response = session_client.patch(f"{MODELS}/{model_alias.id}", request, format="json")

    assert response.status_code == 200, response.content
    expected = [("azure_openai", "mini-eastus"), ("anthropic", "claude-3-5-haiku")]
    assert deployments(response.json()) == expected
    assert deployments(session_client.get(f"{MODELS}/{model_alias.id}").json()) == expected
    assert model_alias.deployments.count() == 2


@pytest.mark.parametrize("incomplete", [{"provider": "openai"}, {"upstream_model": "gpt-4o-mini"}])
def test_a_patch_refuses_an_incomplete_deployment_and_keeps_the_old_ones(
    session_client, model_alias, incomplete
):
    # A PATCH replaces the whole list, so each deployment in it is complete: not a 500.
    before = deployments(session_client.get(f"{MODELS}/{model_alias.id}").json())

    response = session_client.patch(
        f"{MODELS}/{model_alias.id}", {"deployments": [incomplete]}, format="json"
    )

    error = assert_error(response, 400, "validation_error")
    assert {"deployments[0].provider", "deployments[0].upstream_model"} & set(error["fields"])
    assert deployments(session_client.get(f"{MODELS}/{model_alias.id}").json()) == before


def test_a_patch_without_deployments_keeps_them(session_client, model_alias, fallback):
    changes = {"description": "Hard questions", "fallbacks": ["cheap"], "is_active": False}

    response = session_client.patch(f"{MODELS}/{model_alias.id}", changes, format="json")

    assert response.status_code == 200, response.content
    body = session_client.get(f"{MODELS}/{model_alias.id}").json()
    assert {field: body[field] for field in changes} == changes
    assert deployments(body) == [("openai", "gpt-4o")]


def test_an_alias_can_be_renamed(session_client, model_alias):
    response = session_client.patch(f"{MODELS}/{model_alias.id}", {"alias": "clever"}, format="json")

    assert response.status_code == 200
    assert aliases(session_client) == ["clever"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"deployments": []}, "deployments"),
        ({"alias": "openai/gpt-4o"}, "alias"),
        ({"fallbacks": ["smart"]}, "fallbacks"),
        ({"fallbacks": ["nowhere"]}, "fallbacks"),
        ({"is_active": "perhaps"}, "is_active"),
    ],
)
def test_it_rejects_a_bad_change_and_keeps_the_alias(session_client, model_alias, changes, field):
    before = session_client.get(f"{MODELS}/{model_alias.id}").json()

    response = session_client.patch(f"{MODELS}/{model_alias.id}", changes, format="json")

    assert_invalid_field(response, field)
    assert session_client.get(f"{MODELS}/{model_alias.id}").json() == before


def test_it_refuses_to_rename_an_alias_to_a_name_that_is_taken(session_client, model_alias, fallback):
    response = session_client.patch(f"{MODELS}/{model_alias.id}", {"alias": "cheap"}, format="json")

    assert_error(response, 409, "model_alias_taken")
    assert sorted(aliases(session_client)) == ["cheap", "smart"]


def test_it_refuses_to_rename_an_alias_that_another_falls_back_to(session_client, model_alias, fallback):
    session_client.patch(f"{MODELS}/{model_alias.id}", {"fallbacks": ["cheap"]}, format="json")

    response = session_client.patch(f"{MODELS}/{fallback.id}", {"alias": "cheaper"}, format="json")

    error = assert_error(response, 409, "model_alias_in_use")
    assert "smart" in error["message"]
    assert sorted(aliases(session_client)) == ["cheap", "smart"]


def test_it_deletes_an_alias_and_its_deployments(session_client, model_alias):
    response = session_client.delete(f"{MODELS}/{model_alias.id}")

    assert response.status_code == 204
    assert response.content == b""
    assert aliases(session_client) == []
    assert_error(session_client.get(f"{MODELS}/{model_alias.id}"), 404, "not_found")
    assert not model_alias.deployments.exists()


def test_it_refuses_to_delete_an_alias_that_another_falls_back_to(session_client, model_alias, fallback):
    session_client.patch(f"{MODELS}/{model_alias.id}", {"fallbacks": ["cheap"]}, format="json")

    refused = session_client.delete(f"{MODELS}/{fallback.id}")

    error = assert_error(refused, 409, "model_alias_in_use")
    assert error["type"] == "conflict_error"
    assert "smart" in error["message"]
    assert sorted(aliases(session_client)) == ["cheap", "smart"]

    session_client.patch(f"{MODELS}/{model_alias.id}", {"fallbacks": []}, format="json")
    assert session_client.delete(f"{MODELS}/{fallback.id}").status_code == 204


def test_changing_and_deleting_an_alias_bump_the_configuration_generation(
    session_client, organization, model_alias, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(
            f"{MODELS}/{model_alias.id}", {"deployments": [AZURE_MINI]}, format="json"
        )
        assert response.status_code == 200
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert session_client.delete(f"{MODELS}/{model_alias.id}").status_code == 204


def test_it_refuses_put_on_an_alias(session_client, model_alias):
    assert_error(
        session_client.put(f"{MODELS}/{model_alias.id}", new_alias(), format="json"),
        405,
        "method_not_allowed",
    )


# --- aliases: roles and the outsider -----------------------------------------------------------


def test_a_member_can_read_the_catalog_but_not_change_it(client_for, organization, model_alias):
    member = client_for(organization, "member")
    one = f"{MODELS}/{model_alias.id}"

    assert aliases(member) == ["smart"]
    assert member.get(one).status_code == 200
    assert_error(member.post(MODELS, new_alias(), format="json"), 403, "permission_denied")
    assert_error(member.patch(one, {"description": "mine"}, format="json"), 403, "permission_denied")
    assert_error(member.delete(one), 403, "permission_denied")
    assert aliases(member) == ["smart"]


def test_the_outsiders_alias_is_invisible_and_untouchable(session_client, outsiders_alias):
    one = f"{MODELS}/{outsiders_alias.id}"

    responses = [
        session_client.get(one),
        session_client.patch(one, {"description": "mine now"}, format="json"),
        session_client.delete(one),
    ]

    for response in responses:
        assert_error(response, 404, "not_found")
    assert session_client.get(one).json() == session_client.get(f"{MODELS}/{uuid.uuid4()}").json()
    assert aliases(session_client) == []
    outsiders_alias.refresh_from_db()
    assert outsiders_alias.description == ""


# --- prices ------------------------------------------------------------------------------------


def new_price(**overrides) -> dict:
    return {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_per_mtok": "0.12",
        "output_per_mtok": "0.48",
        "effective_from": "2026-01-01T00:00:00Z",
        **overrides,
    }


def test_it_creates_a_dated_price_version_with_decimal_strings(session_client):
    response = session_client.post(PRICES, new_price(cached_input_per_mtok="0.06"), format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == PRICE_FIELDS
    assert Decimal(body["input_per_mtok"]) == Decimal("0.12")
    assert Decimal(body["output_per_mtok"]) == Decimal("0.48")
    assert Decimal(body["cached_input_per_mtok"]) == Decimal("0.06")
    assert body["reasoning_per_mtok"] is None
    assert body["effective_from"] == "2026-01-01T00:00:00Z"
    assert all(isinstance(body[f], str) for f in ("input_per_mtok", "output_per_mtok"))
    price = ModelPrice.objects.get(pk=body["id"])
    assert price.input_per_mtok == Decimal("0.12")


def test_a_later_version_of_the_same_model_is_a_new_price(session_client):
    session_client.post(PRICES, new_price(), format="json")

    response = session_client.post(
        PRICES, new_price(input_per_mtok="0.10", effective_from="2026-06-01T00:00:00Z"), format="json"
    )

    assert response.status_code == 201
    assert ModelPrice.objects.count() == 2


def test_it_refuses_a_second_version_with_the_same_model_and_date(session_client):
    first = session_client.post(PRICES, new_price(), format="json")

    response = session_client.post(PRICES, new_price(input_per_mtok="0.99"), format="json")

    assert first.status_code == 201
    error = assert_error(response, 409, "price_version_exists")
    assert error["type"] == "conflict_error"
    assert ModelPrice.objects.get().input_per_mtok == Decimal("0.12")


def test_the_outsiders_price_of_the_same_model_and_date_does_not_conflict(session_client, outsider):
    ModelPriceFactory(organization=outsider.organization, effective_from="2026-01-01T00:00:00Z")

    assert session_client.post(PRICES, new_price(), format="json").status_code == 201


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"input_per_mtok": "-0.01"}, "input_per_mtok"),
        ({"output_per_mtok": -1}, "output_per_mtok"),
        ({"cached_input_per_mtok": "-1"}, "cached_input_per_mtok"),
        ({"reasoning_per_mtok": "-1"}, "reasoning_per_mtok"),
        ({"input_per_mtok": "cheap"}, "input_per_mtok"),
        ({"input_per_mtok": "NaN"}, "input_per_mtok"),
        ({"input_per_mtok": "0.0000001"}, "input_per_mtok"),
        ({"input_per_mtok": None}, "input_per_mtok"),
        ({"provider": "cohere"}, "provider"),
        ({"model": ""}, "model"),
        ({"model": 4}, "model"),
        ({"effective_from": "soon"}, "effective_from"),
        ({"effective_from": None}, "effective_from"),
    ],
)
def test_it_rejects_a_bad_price_naming_the_field(session_client, overrides, field):
    response = session_client.post(PRICES, new_price(**overrides), format="json")

    assert_invalid_field(response, field)
    assert not ModelPrice.objects.exists()


@pytest.mark.parametrize(
    "missing", ["provider", "model", "input_per_mtok", "output_per_mtok", "effective_from"]
)
def test_a_price_needs_its_provider_model_prices_and_date(session_client, missing):
    request = new_price()
    del request[missing]

    assert_invalid_field(session_client.post(PRICES, request, format="json"), missing)


def test_the_price_list_shows_only_the_organizations_versions(session_client, organization, outsider):
    mine = ModelPriceFactory(organization=organization)
    theirs = ModelPriceFactory(organization=outsider.organization)

    response = session_client.get(PRICES)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    assert [price["id"] for price in body["results"]] == [str(mine.id)]
    assert set(body["results"][0]) == PRICE_FIELDS
    assert str(theirs.id) not in response.content.decode()


def test_a_price_version_is_never_edited_or_deleted_through_the_api(session_client, organization):
    price = ModelPriceFactory(organization=organization)

    for response in (
        session_client.patch(f"{PRICES}/{price.id}", {"input_per_mtok": "0"}, format="json"),
        session_client.delete(f"{PRICES}/{price.id}"),
    ):
        assert_error(response, 404, "not_found")
    assert ModelPrice.objects.get().input_per_mtok == Decimal("0.15")


def test_the_shipped_prices_are_listed_with_decimal_strings(session_client):
    response = session_client.get(f"{PRICES}/shipped")

    assert response.status_code == 200
    rows = response.json()
    assert len(rows) == sum(len(versions) for versions in SHIPPED_PRICES.values())
    by_model = {(row["provider"], row["model"]): row for row in rows}
    mini = by_model[("openai", "gpt-4o-mini")]
    assert isinstance(mini["input_per_mtok"], str)
    assert Decimal(mini["input_per_mtok"]) == Decimal("0.15")
    assert Decimal(mini["output_per_mtok"]) == Decimal("0.60")
    assert Decimal(mini["cached_input_per_mtok"]) == Decimal("0.075")
    assert mini["reasoning_per_mtok"] is None
    assert mini["effective_from"].endswith("Z")
    assert by_model[("openai", "text-embedding-3-small")]["cached_input_per_mtok"] is None


def test_the_shipped_prices_do_not_depend_on_the_organizations_own(session_client, organization):
    ModelPriceFactory(organization=organization, input_per_mtok=Decimal("9"))

    rows = session_client.get(f"{PRICES}/shipped").json()

    mini = next(row for row in rows if (row["provider"], row["model"]) == ("openai", "gpt-4o-mini"))
    assert Decimal(mini["input_per_mtok"]) == Decimal("0.15")


def test_a_member_can_read_prices_but_not_add_one(client_for, organization):
    member = client_for(organization, "member")

    assert member.get(PRICES).status_code == 200
    assert member.get(f"{PRICES}/shipped").status_code == 200
    assert_error(member.post(PRICES, new_price(), format="json"), 403, "permission_denied")
    assert not ModelPrice.objects.exists()


def test_adding_a_price_bumps_the_configuration_generation(
    session_client, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert session_client.post(PRICES, new_price(), format="json").status_code == 201
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        assert session_client.post(PRICES, new_price(), format="json").status_code == 409
