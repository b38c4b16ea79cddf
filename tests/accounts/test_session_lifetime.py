"""How long a management session lives: a password change ends every session of the account at once,
and no chain of refreshes outlives GATEWAY_SESSION_MAX_AGE_DAYS from the sign-in."""

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from tests.conftest import login
from tests.factories import PASSWORD, UserFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "another-long-password-42"
SIGN_IN = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def refresh(api_client, token: str):
    return api_client.post("/api/v1/auth/refresh", {"refresh": token}, format="json")


def get_with(api_client, access: str):
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {access}")
    response = api_client.get("/api/v1/organizations/current")
    api_client.credentials()
    return response


def change_password_in_the_admin_console(user) -> None:
    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))
    response = browser.post(
        f"/admin/accounts/user/{user.pk}/password/", {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    )
    assert response.status_code == 302, response.content


def change_password_directly(user) -> None:
    user.set_password(NEW_PASSWORD)
    user.save()


@pytest.mark.parametrize("change_password", [change_password_in_the_admin_console, change_password_directly])
def test_a_password_change_ends_every_session_of_the_account(api_client, owner, change_password):
    first = login(api_client, owner.user.email)
    rotated = refresh(api_client, login(api_client, owner.user.email)["refresh"]).json()

    change_password(owner.user)

    for tokens in (first, rotated):
        assert_error(refresh(api_client, tokens["refresh"]), 401, "password_changed")
        assert_error(get_with(api_client, tokens["access"]), 401, "password_changed")


def test_a_session_started_after_the_password_change_works(api_client, owner):
    login(api_client, owner.user.email)
    change_password_directly(owner.user)

    tokens = login(api_client, owner.user.email, NEW_PASSWORD)

    assert get_with(api_client, tokens["access"]).status_code == 200
    assert refresh(api_client, tokens["refresh"]).status_code == 200


def test_a_password_change_leaves_other_accounts_signed_in(api_client, owner, outsider):
    theirs = login(api_client, outsider.user.email)

    change_password_directly(owner.user)

    assert get_with(api_client, theirs["access"]).status_code == 200
    assert refresh(api_client, theirs["refresh"]).status_code == 200


def test_refreshing_cannot_keep_a_session_alive_past_its_maximum_age(api_client, owner, settings):
    assert settings.GATEWAY_SESSION_MAX_AGE_DAYS == 30
    with time_machine.travel(SIGN_IN, tick=False) as clock:
        tokens = login(api_client, owner.user.email)
        for _ in range(4):  # every six days, within the refresh token's seven
            clock.shift(timedelta(days=6))
            tokens = refresh(api_client, tokens["refresh"]).json()
        clock.move_to(SIGN_IN + timedelta(days=30, minutes=-5))
        tokens = refresh(api_client, tokens["refresh"]).json()
        assert get_with(api_client, tokens["access"]).status_code == 200

        clock.move_to(SIGN_IN + timedelta(days=30, minutes=1))

        assert refresh(api_client, tokens["refresh"]).status_code == 401
        # The last access token (15 minutes) ends with the session, not 10 minutes after it.
        assert get_with(api_client, tokens["access"]).status_code == 401
        assert get_with(api_client, login(api_client, owner.user.email)["access"]).status_code == 200


def test_the_maximum_age_is_a_setting(api_client, owner, settings):
    settings.GATEWAY_SESSION_MAX_AGE_DAYS = 2
    with time_machine.travel(SIGN_IN, tick=False) as clock:
        tokens = login(api_client, owner.user.email)
        clock.shift(timedelta(days=1))
        tokens = refresh(api_client, tokens["refresh"]).json()
        assert "refresh" in tokens

        clock.shift(timedelta(days=1, seconds=1))

        assert refresh(api_client, tokens["refresh"]).status_code == 401


def test_a_lowered_maximum_age_applies_to_sessions_already_running(api_client, owner, settings):
    with time_machine.travel(SIGN_IN, tick=False) as clock:
        tokens = login(api_client, owner.user.email)
        clock.shift(timedelta(days=3))
        settings.GATEWAY_SESSION_MAX_AGE_DAYS = 2

        assert_error(refresh(api_client, tokens["refresh"]), 401, "session_expired")


def test_the_password_is_not_needed_to_read_a_session_token(api_client, owner):
    """The password claim is a keyed digest: the token carries nothing derived from the password in
    a form that could be checked offline."""
    tokens = login(api_client, owner.user.email)
    payload = tokens["access"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))

    assert PASSWORD not in json.dumps(claims)
    assert owner.user.password not in json.dumps(claims)
    assert "hash_password" not in claims
