"""``POST /api/v1/auth/password``: the signed-in account changes its password; every session of the
account ends (the caller's too: the 204 carries no new pair), other accounts' sessions do not."""

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from apps.organizations.member_sessions import session_issue
from tests.conftest import login
from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a-brand-new-long-password-7"


def change_password(access: str, current_password: str = PASSWORD, new_password: str = NEW_PASSWORD, **extra):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {access}")
    body = {"current_password": current_password, "new_password": new_password, **extra}
    return client.post("/api/v1/auth/password", body, format="json")


def sign_in(email: str, password: str, **extra):
    return APIClient().post(
        "/api/v1/auth/login", {"email": email, "password": password, **extra}, format="json"
    )


def refresh(token: str):
    return APIClient().post("/api/v1/auth/refresh", {"refresh": token}, format="json")


def read_organization(access: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {access}")
    return client.get("/api/v1/organizations/current")


def test_it_changes_the_password_so_the_new_one_signs_in_and_the_old_one_does_not(api_client, owner):
    tokens = login(api_client, owner.user.email)

    response = change_password(tokens["access"])

    assert response.status_code == 204
    assert response.content == b""
    assert sign_in(owner.user.email, NEW_PASSWORD).status_code == 200
    assert_error(sign_in(owner.user.email, PASSWORD), 401, "invalid_credentials")


def test_it_refuses_a_wrong_current_password_and_keeps_the_password(api_client, owner):
    tokens = login(api_client, owner.user.email)

    response = change_password(tokens["access"], current_password="not-the-password")

    error = assert_error(response, 400, "invalid_current_password")
    assert error["type"] == "invalid_request_error"
    assert list(error["fields"]) == ["current_password"]
    assert read_organization(tokens["access"]).status_code == 200  # nothing changed: the session lives
    assert sign_in(owner.user.email, PASSWORD).status_code == 200


@pytest.mark.parametrize(
    ("new_password", "reasons"),
    [
        ("short", ["This password is too short. It must contain at least 10 characters."]),
        ("", ["This password is too short. It must contain at least 10 characters."]),
        ("qwertyuiop", ["This password is too common."]),
        ("1234567890", ["This password is too common.", "This password is entirely numeric."]),
    ],
)
def test_it_refuses_a_new_password_the_validators_refuse_with_every_reason(
    api_client, owner, new_password, reasons
):
    tokens = login(api_client, owner.user.email)

    response = change_password(tokens["access"], new_password=new_password)

    error = assert_error(response, 400, "validation_error")
    assert error["fields"] == {"new_password": reasons}
    assert sign_in(owner.user.email, PASSWORD).status_code == 200


def test_it_refuses_a_new_password_like_the_email(api_client, owner):
    tokens = login(api_client, owner.user.email)

    response = change_password(tokens["access"], new_password=f"{owner.user.email}!")

    error = assert_error(response, 400, "validation_error")
    assert error["fields"] == {"new_password": ["The password is too similar to the email."]}


@pytest.mark.parametrize(
    "body",
    [
        {"new_password": NEW_PASSWORD},
        {"current_password": PASSWORD},
        {"current_password": PASSWORD, "new_password": 1234567890123},
        {"current_password": PASSWORD, "new_password": NEW_PASSWORD, "password": NEW_PASSWORD},
    ],
)
def test_it_refuses_a_body_of_the_wrong_shape(api_client, owner, body):
    tokens = login(api_client, owner.user.email)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")

    response = client.post("/api/v1/auth/password", body, format="json")

    assert_error(response, 400, "validation_error")
    assert sign_in(owner.user.email, PASSWORD).status_code == 200


def test_every_session_of_the_account_ends_the_callers_included(api_client, owner, outsider):
    other = login(api_client, owner.user.email)
    rotated = refresh(login(api_client, owner.user.email)["refresh"]).json()
    caller = login(api_client, owner.user.email)
    theirs = login(api_client, outsider.user.email)

    assert change_password(caller["access"]).status_code == 204

    for tokens in (other, rotated, caller):
        assert_error(refresh(tokens["refresh"]), 401, "password_changed")
        assert_error(read_organization(tokens["access"]), 401, "password_changed")
    # Another account's session is none of this change's business.
    assert read_organization(theirs["access"]).status_code == 200
    assert refresh(theirs["refresh"]).status_code == 200


def test_a_session_begun_with_the_new_password_works(api_client, owner):
    assert change_password(login(api_client, owner.user.email)["access"]).status_code == 204

    tokens = login(api_client, owner.user.email, NEW_PASSWORD)

    assert read_organization(tokens["access"]).status_code == 200
    assert refresh(tokens["refresh"]).status_code == 200


def test_a_member_of_two_organizations_changes_it_from_either_and_both_sessions_end(api_client, owner):
    second = MembershipFactory(user=owner.user, role="member")
    first_session = login(api_client, owner.user.email)
    second_session = sign_in(owner.user.email, PASSWORD, organization_id=str(second.organization_id)).json()
    assert read_organization(second_session["access"]).json()["id"] == str(second.organization_id)

    assert change_password(second_session["access"]).status_code == 204

    for tokens in (first_session, second_session):
        assert_error(refresh(tokens["refresh"]), 401, "password_changed")
    for organization_id in (owner.organization_id, second.organization_id):
        response = sign_in(owner.user.email, NEW_PASSWORD, organization_id=str(organization_id))
        assert response.status_code == 200


def test_an_account_without_a_password_is_told_its_identity_provider_manages_it(owner):
    sso_only = MembershipFactory(
        organization=owner.organization, role="member", user=UserFactory(password=None)
    )
    tokens = session_issue(user=sso_only.user, organization_id=sso_only.organization_id)

    response = change_password(tokens["access"], current_password="anything-at-all")

    error = assert_error(response, 403, "password_not_set")
    assert "single sign-on" in error["message"]
    sso_only.user.refresh_from_db()
    assert not sso_only.user.has_usable_password()
    assert read_organization(tokens["access"]).status_code == 200


def test_it_needs_a_session_token(api_client, owner):
    response = api_client.post(
        "/api/v1/auth/password", {"current_password": PASSWORD, "new_password": NEW_PASSWORD}, format="json"
    )

    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == 'Bearer realm="management"'
    assert sign_in(owner.user.email, PASSWORD).status_code == 200


def test_wrong_current_passwords_count_toward_the_sign_in_lock_out(api_client, owner):
    tokens = login(api_client, owner.user.email)
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        assert_error(
            change_password(tokens["access"], current_password="a-guess"), 400, "invalid_current_password"
        )

    # The right password is refused too, here and at the login, until the window passes.
    response = change_password(tokens["access"])

    error = assert_error(response, 429, "too_many_login_attempts")
    assert int(response["Retry-After"]) > 0
    assert error["type"] == "rate_limit_error"
    assert_error(sign_in(owner.user.email, PASSWORD), 429, "too_many_login_attempts")
