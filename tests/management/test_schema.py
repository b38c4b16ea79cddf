"""The management API describes itself: an OpenAPI document and interactive docs beside it."""

import json
import re

import pytest
import yaml

from tests.conftest import login

pytestmark = pytest.mark.django_db


def test_it_serves_an_openapi_document_of_the_management_api(api_client):
    response = api_client.get("/api/v1/schema")

    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert {"/api/v1/api-keys", "/api/v1/api-keys/{id}", "/api/v1/auth/login", "/api/v1/teams"} <= set(
        schema["paths"]
    )
    assert {"get", "post"} <= set(schema["paths"]["/api/v1/api-keys"])


def test_it_serves_the_schema_as_json_on_request(api_client):
    response = api_client.get("/api/v1/schema", {"format": "json"})

    assert response.status_code == 200
    assert "/api/v1/auth/login" in json.loads(response.content)["paths"]


def test_the_schema_documents_only_the_management_surface(api_client):
    paths = yaml.safe_load(api_client.get("/api/v1/schema").content)["paths"]

    assert all(path.startswith("/api/v1/") for path in paths)
    assert not any(path.startswith("/v1/") for path in paths)


def test_it_serves_interactive_docs_as_html(api_client):
    response = api_client.get("/api/v1/docs")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"/api/v1/schema" in response.content


def test_the_schema_is_the_same_for_every_organization(session_client, api_client, outsider):
    # The document describes the API; it must not carry one organization's objects into another's view.
    tokens = login(api_client, outsider.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")

    mine = session_client.get("/api/v1/schema", {"format": "json"})
    theirs = api_client.get("/api/v1/schema", {"format": "json"})

    assert mine.status_code == theirs.status_code == 200
    assert json.loads(mine.content) == json.loads(theirs.content)
    assert str(outsider.organization_id) not in mine.content.decode()


def _request_schemas(api_client) -> dict:
    return yaml.safe_load(api_client.get("/api/v1/schema").content)["components"]["schemas"]


def test_a_body_that_refuses_unknown_fields_says_so(api_client):
    schemas = _request_schemas(api_client)

    # ClosedSerializer's bodies: an unknown field is a 400 ("Unknown field."), so not allowed here.
    for name in (
        "ExperimentInputRequest",
        "VariantInputRequest",
        "PolicyObjectRequest",
        "PolicyScopeRequest",
    ):
        assert schemas[name]["additionalProperties"] is False, name
    # An open body (a team's, as the API's has always been) says nothing of the kind.
    assert "additionalProperties" not in schemas["TeamRequest"]


MODEL_PATTERNS = [
    "gpt-4o",
    "openai/gpt-4o*",
    " fast ",
    "a//b",
    "a/b/",
    "/gpt",
    "openai/",
    "",
    " ",
    "a b",
    "gpté",
]


@pytest.mark.parametrize("pattern", MODEL_PATTERNS)
def test_the_schema_states_which_model_patterns_the_api_takes(session_client, api_client, pattern):
    items = _request_schemas(api_client)["TeamRequest"]["properties"]["allowed_models"]["items"]

    response = session_client.post(
        "/api/v1/teams", {"name": "Team", "allowed_models": [pattern]}, format="json"
    )

    assert response.status_code in (201, 400), response.content
    assert (re.search(items["pattern"], pattern) is not None) == (response.status_code == 201)


def test_the_schema_states_that_only_an_experiment_on_a_template_sets_a_version(api_client):
    import jsonschema

    schemas = _request_schemas(api_client)
    # The body's schema as a document of its own, its references to the components resolved in it.
    validator = jsonschema.Draft4Validator(
        {**schemas["ExperimentInputRequest"], "components": {"schemas": schemas}}
    )
    versioned = [{"name": "a", "weight": 1, "prompt_version": 2}, {"name": "b", "weight": 1}]
    unversioned = [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}]

    assert validator.is_valid({"name": "E", "target": {"prompt": "greeting"}, "variants": versioned})
    assert not validator.is_valid({"name": "E", "target": {"model": "fast"}, "variants": versioned})
    assert validator.is_valid({"name": "E", "target": {"model": "fast"}, "variants": unversioned})
