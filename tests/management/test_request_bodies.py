"""Bodies the management API cannot take answer in its error shape, never a 500: JSON nested too deeply
(Python's parser would raise RecursionError), a body over DATA_UPLOAD_MAX_MEMORY_SIZE, too many query
parameters. The sign-in endpoint is tested too: anyone can reach it."""

import json

import pytest
from django.conf import settings

from apps.teams.models import Team
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

MAX_DEPTH = 64


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def login_body_with(value) -> str:
    return json.dumps({"email": "someone@example.com", "password": "not-the-password", "extra": value})


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_a_deeply_nested_sign_in_body_is_a_parse_error(api_client, depth):
    response = api_client.post("/api/v1/auth/login", nested(depth), content_type="application/json")

    error = assert_error(response, 400, "parse_error")
    assert error["type"] == "invalid_request_error"
    assert "nested" in error["message"]


def test_a_deeply_nested_body_is_a_parse_error_on_an_authenticated_endpoint(session_client, organization):
    body = '{"name": "Research", "metadata": ' + nested(5_000) + "}"

    response = session_client.post("/api/v1/teams", body, content_type="application/json")

    assert_error(response, 400, "parse_error")
    assert not Team.objects.filter(organization=organization).exists()


def test_nesting_deeper_than_the_limit_is_refused_even_where_python_could_parse_it(session_client):
    body = json.dumps({"name": "Research", "x": json.loads(nested(500))})

    response = session_client.post("/api/v1/teams", body, content_type="application/json")

    assert_error(response, 400, "parse_error")


def test_ordinary_nesting_is_parsed_as_before(api_client):
    value = json.loads(nested(MAX_DEPTH - 1))  # the body's own object is the 64th level

    response = api_client.post("/api/v1/auth/login", login_body_with(value), content_type="application/json")

    assert_error(response, 401, "invalid_credentials")


def test_one_level_past_the_limit_is_refused(api_client):
    value = json.loads(nested(MAX_DEPTH))

    response = api_client.post("/api/v1/auth/login", login_body_with(value), content_type="application/json")

    assert_error(response, 400, "parse_error")


def too_big() -> bytes:
    return b'{"email": "' + b"a" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) + b'@example.com"}'


def test_a_sign_in_body_over_the_size_limit_is_413(api_client):
    response = api_client.post("/api/v1/auth/login", too_big(), content_type="application/json")

    error = assert_error(response, 413, "request_too_large")
    assert error["type"] == "invalid_request_error"
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in error["message"]


def test_a_body_over_the_size_limit_is_413_on_an_authenticated_endpoint(session_client, organization):
    response = session_client.post("/api/v1/teams", too_big(), content_type="application/json")

    assert_error(response, 413, "request_too_large")
    assert not Team.objects.filter(organization=organization).exists()


def test_too_many_query_parameters_are_a_bad_request(session_client):
    query = "&".join(f"p{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))

    response = session_client.get(f"/api/v1/teams?{query}")

    assert_error(response, 400, "bad_request")
