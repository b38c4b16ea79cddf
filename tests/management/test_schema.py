"""The management API describes itself: an OpenAPI document and interactive docs beside it."""

import json

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
