"""Session authentication of the management API: login, refresh, logout and the Authorization header."""

import pytest
from django.conf import settings

from apps.accounts.models import User
from apps.organizations.models import Membership
from tests.conftest import login
from tests.factories import PASSWORD, MembershipFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db


def post_login(client, email: str, password: str = PASSWORD, **extra):
    return client.post("/api/v1/auth/login", {"email": email, "password": password, **extra}, format="json")


def bearer(client, token: str):
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


# --- login ---------------------------------------------------------------------------------------


def test_it_issues_an_access_and_a_refresh_token_on_login(api_client, owner):
    response = post_login(api_client, owner.user.email)

    assert response.status_code == 200
    tokens = response.json()
    assert set(tokens) == {"access", "refresh"}
    assert tokens["access"] != tokens["refresh"]
    current = bearer(api_client, tokens["access"]).get("/api/v1/organizations/current")
    assert current.status_code == 200
    assert current.json()["id"] == str(owner.organization_id)


def test_it_rejects_a_wrong_password_with_invalid_credentials(api_client, owner):
    response = post_login(api_client, owner.user.email, "not-the-password")

    error = assert_error(response, 401, "invalid_credentials")
    assert error["type"] == "authentication_error"
    assert "access" not in response.json()


def test_it_answers_an_unknown_email_exactly_like_a_wrong_password(api_client, owner):
    unknown = post_login(api_client, "nobody@example.com", "not-the-password")
    wrong = post_login(api_client, owner.user.email, "not-the-password")

    assert_error(unknown, 401, "invalid_credentials")
    assert unknown.json() == wrong.json()


def test_it_rejects_a_login_without_a_password_as_a_validation_error(api_client, owner):
    response = api_client.post("/api/v1/auth/login", {"email": owner.user.email}, format="json")

    error = assert_error(response, 400, "validation_error")
    assert "password" in error["fields"]


def test_it_refuses_even_the_right_password_after_too_many_failures(api_client, owner):
    limit = settings.GATEWAY_LOGIN_FAILURE_LIMIT
    for _ in range(limit):
        assert post_login(api_client, owner.user.email, "not-the-password").status_code == 401

    response = post_login(api_client, owner.user.email)

    error = assert_error(response, 429, "too_many_login_attempts")
    assert error["type"] == "rate_limit_error"
    assert int(response["Retry-After"]) > 0


def test_it_still_accepts_the_right_password_just_below_the_failure_limit(api_client, owner):
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT - 1):
        post_login(api_client, owner.user.email, "not-the-password")

    assert post_login(api_client, owner.user.email).status_code == 200


def test_failures_on_one_account_do_not_lock_out_another(api_client, owner, outsider):
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        post_login(api_client, owner.user.email, "not-the-password")

    assert post_login(api_client, outsider.user.email).status_code == 200


def test_it_refuses_a_login_into_an_organization_the_user_is_not_a_member_of(api_client, owner, outsider):
    response = post_login(api_client, owner.user.email, organization_id=str(outsider.organization_id))

    error = assert_error(response, 403, "no_organization")
    assert error["type"] == "permission_error"


def test_it_signs_in_to_the_organization_asked_for_when_the_user_has_several(api_client, owner):
    second = MembershipFactory(user=owner.user, role="member")

    tokens = post_login(api_client, owner.user.email, organization_id=str(second.organization_id)).json()

    current = bearer(api_client, tokens["access"]).get("/api/v1/organizations/current").json()
    assert current["id"] == str(second.organization_id)
    assert current["role"] == "member"


# --- refresh and logout --------------------------------------------------------------------------


def test_refresh_returns_a_new_pair_and_refuses_the_old_refresh_token(api_client, owner):
    tokens = login(api_client, owner.user.email)

    refreshed = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["refresh"]}, format="json")

    assert refreshed.status_code == 200
    pair = refreshed.json()
    assert set(pair) == {"access", "refresh"}
    assert pair["refresh"] != tokens["refresh"]
    assert bearer(api_client, pair["access"]).get("/api/v1/api-keys").status_code == 200
    again = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["refresh"]}, format="json")
    assert_error(again, 401, "token_not_valid")


def test_a_refreshed_session_stays_in_the_organization_it_signed_in_to(api_client, owner):
    second = MembershipFactory(user=owner.user, role="admin")
    tokens = post_login(api_client, owner.user.email, organization_id=str(second.organization_id)).json()

    pair = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["refresh"]}, format="json").json()

    current = bearer(api_client, pair["access"]).get("/api/v1/organizations/current").json()
    assert current["id"] == str(second.organization_id)


def test_it_refuses_an_access_token_where_a_refresh_token_is_expected(api_client, owner):
    tokens = login(api_client, owner.user.email)

    response = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["access"]}, format="json")

    assert_error(response, 401, "token_not_valid")


def test_logout_revokes_the_refresh_token(api_client, owner):
    tokens = login(api_client, owner.user.email)

    logout = api_client.post("/api/v1/auth/logout", {"refresh": tokens["refresh"]}, format="json")

    assert logout.status_code == 204
    refresh = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["refresh"]}, format="json")
    assert_error(refresh, 401, "token_not_valid")


def test_it_rejects_logout_with_a_token_that_is_not_a_refresh_token(api_client):
    response = api_client.post("/api/v1/auth/logout", {"refresh": "garbage"}, format="json")

    assert_error(response, 401, "token_not_valid")


def test_it_refuses_to_refresh_the_session_of_a_deleted_user(api_client, owner):
    tokens = login(api_client, owner.user.email)
    User.objects.filter(pk=owner.user_id).delete()

    response = api_client.post("/api/v1/auth/refresh", {"refresh": tokens["refresh"]}, format="json")

    assert_error(response, 401, "token_not_valid")


# --- the Authorization header on a management endpoint -----------------------------------------


def test_it_requires_credentials(api_client, owner):
    response = api_client.get("/api/v1/api-keys")

    error = assert_error(response, 401, "not_authenticated")
    assert error["type"] == "authentication_error"


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Bearer two parts", "Basic dXNlcjpwYXNz"])
def test_it_rejects_a_garbled_authorization_header(api_client, owner, header):
    api_client.credentials(HTTP_AUTHORIZATION=header)

    response = api_client.get("/api/v1/api-keys")

    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "authentication_error"
    assert error["code"] and error["message"]
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Token abc", "Basic dXNlcjpwYXNz", "bearer abc"])
def test_it_calls_a_header_of_another_scheme_malformed(api_client, owner, header):
    api_client.credentials(HTTP_AUTHORIZATION=header)

    response = api_client.get("/api/v1/api-keys")

    assert_error(response, 401, "malformed_authorization")


@pytest.mark.parametrize("header", ["Bearer", "Bearer two parts"])
def test_a_bearer_header_without_exactly_one_token_says_the_header_is_malformed(api_client, owner, header):
    api_client.credentials(HTTP_AUTHORIZATION=header)

    response = api_client.get("/api/v1/api-keys")

    assert_error(response, 401, "malformed_authorization")


def test_it_rejects_a_bearer_value_that_is_not_a_token(api_client, owner):
    response = bearer(api_client, "not-a-jwt").get("/api/v1/api-keys")

    assert_error(response, 401, "token_not_valid")


def test_it_rejects_a_refresh_token_used_as_an_access_token(api_client, owner):
    tokens = login(api_client, owner.user.email)

    response = bearer(api_client, tokens["refresh"]).get("/api/v1/api-keys")

    assert_error(response, 401, "token_not_valid")


def test_it_rejects_an_api_key_and_says_it_is_for_the_proxy(api_client, api_key):
    _, secret = api_key
    assert secret.startswith("sk_live_")

    response = bearer(api_client, secret).get("/api/v1/api-keys")

    error = assert_error(response, 401, "api_key_not_accepted")
    assert "/api/v1/auth/login" in error["message"]


def test_it_rejects_a_session_whose_membership_was_deleted(session_client, owner):
    Membership.objects.filter(pk=owner.pk).delete()

    response = session_client.get("/api/v1/api-keys")

    assert_error(response, 401, "membership_not_found")


def test_every_401_names_the_authentication_scheme(api_client, owner, api_key):
    _, secret = api_key
    responses = [
        api_client.get("/api/v1/api-keys"),
        post_login(api_client, owner.user.email, "not-the-password"),
        api_client.post("/api/v1/auth/refresh", {"refresh": "garbage"}, format="json"),
        bearer(api_client, "not-a-jwt").get("/api/v1/api-keys"),
        bearer(api_client, secret).get("/api/v1/api-keys"),
    ]

    for response in responses:
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="management"'
