"""The account page's password form: the same service as ``POST /api/v1/auth/password``; this browser
stays signed in, every other session of the account ends, refusals are shown under their field, and a
person without a password (single sign-on only) is told their identity provider manages it."""

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import login
from tests.console.conftest import csrf_token, post_form
from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

ACCOUNT = "/console/account/"
CHANGE = "/console/account/password"
NEW_PASSWORD = "a-brand-new-long-password-7"


def change_password(
    client: Client,
    current: str = PASSWORD,
    new: str = NEW_PASSWORD,
    confirmation: str | None = None,
):
    return post_form(
        client,
        ACCOUNT,
        CHANGE,
        {
            "current_password": current,
            "new_password": new,
            "new_password_confirmation": new if confirmation is None else confirmation,
        },
    )


def another_browser(user) -> Client:
    browser = Client()
    browser.force_login(user)
    assert browser.get(ACCOUNT).status_code == 200
    return browser


def password_works(email: str, password: str) -> bool:
    response = APIClient().post("/api/v1/auth/login", {"email": email, "password": password}, format="json")
    return response.status_code == 200


def test_the_account_page_offers_the_form(console_for, organization):
    page = console_for(organization, "member").get(ACCOUNT).content.decode()

    assert f'action="{CHANGE}"' in page
    for field in ("current_password", "new_password", "new_password_confirmation"):
        assert f'name="{field}"' in page


def test_it_changes_the_password_keeps_this_browser_and_ends_every_other_session(
    console_for, organization, outsider
):
    client = console_for(organization, "member")
    user = client.membership.user
    other_browser = another_browser(user)
    api_session = login(APIClient(), user.email)
    outsiders_browser = another_browser(outsider.user)

    response = change_password(client)

    assert response.status_code == 302 and response["Location"] == ACCOUNT
    page = client.get(ACCOUNT)
    assert page.status_code == 200
    assert "Your password is changed." in page.content.decode()
    assert other_browser.get(ACCOUNT)["Location"].startswith("/console/login/")
    refreshed = APIClient().post("/api/v1/auth/refresh", {"refresh": api_session["refresh"]}, format="json")
    assert_error(refreshed, 401, "password_changed")
    assert password_works(user.email, NEW_PASSWORD)
    assert not password_works(user.email, PASSWORD)
    assert outsiders_browser.get(ACCOUNT).status_code == 200


def test_a_wrong_current_password_is_said_under_its_field_and_changes_nothing(console_for, organization):
    client = console_for(organization, "member")

    response = change_password(client, current="not-the-password")

    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="current-password-errors"' in page
    assert "The current password is incorrect." in page
    assert password_works(client.membership.user.email, PASSWORD)


@pytest.mark.parametrize(
    ("new", "reason"),
    [
        ("short", "This password is too short. It must contain at least 10 characters."),
        ("qwertyuiop", "This password is too common."),
    ],
)
def test_the_validators_reasons_are_said_under_the_new_password(console_for, organization, new, reason):
    client = console_for(organization, "member")

    response = change_password(client, new=new)

    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="new-password-errors"' in page
    assert reason in page
    assert password_works(client.membership.user.email, PASSWORD)


def test_wrong_current_passwords_lock_the_form_out_as_they_lock_out_the_sign_in(console_for, organization):
    client = console_for(organization, "member")
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        assert change_password(client, current="a-guess").status_code == 400

    response = change_password(client)

    assert response.status_code == 429
    assert 'id="password-errors"' in response.content.decode()
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert not password_works(client.membership.user.email, NEW_PASSWORD)


def test_two_new_passwords_that_differ_change_nothing(console_for, organization):
    client = console_for(organization, "member")

    response = change_password(client, confirmation="a-brand-new-long-password-8")

    assert response.status_code == 400
    assert "The two new passwords differ." in response.content.decode()
    assert password_works(client.membership.user.email, PASSWORD)


def test_a_member_of_two_organizations_changes_it_in_either(console_for, organization):
    client = console_for(organization, "member")
    user = client.membership.user
    second = MembershipFactory(user=user, role="admin")
    switched = post_form(
        client, ACCOUNT, "/console/organization/", {"organization_id": str(second.organization_id)}
    )
    assert switched.status_code == 302

    assert change_password(client).status_code == 302

    assert second.organization.name in client.get(ACCOUNT).content.decode()
    assert password_works(user.email, NEW_PASSWORD)


def test_a_person_without_a_password_is_told_their_identity_provider_manages_it(organization):
    membership = MembershipFactory(organization=organization, role="member", user=UserFactory(password=None))
    client = Client(enforce_csrf_checks=True)
    client.force_login(membership.user)

    page = client.get(ACCOUNT).content.decode()

    assert "your identity provider manages your password" in page
    assert 'name="current_password"' not in page
    # A hand-made POST is refused by the service all the same.
    response = post_form(
        client,
        ACCOUNT,
        CHANGE,
        {"current_password": "", "new_password": NEW_PASSWORD, "new_password_confirmation": NEW_PASSWORD},
    )
    assert response.status_code == 403
    membership.user.refresh_from_db()
    assert not membership.user.has_usable_password()


def test_the_form_needs_a_signed_in_browser_and_its_csrf_token(console_for, organization):
    anonymous = Client().post(CHANGE, {"current_password": PASSWORD, "new_password": NEW_PASSWORD})
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/console/login/")

    client = console_for(organization, "member")
    csrf_token(client, ACCOUNT)
    forged = client.post(
        CHANGE,
        {
            "current_password": PASSWORD,
            "new_password": NEW_PASSWORD,
            "new_password_confirmation": NEW_PASSWORD,
        },
    )
    assert forged.status_code == 403
    assert password_works(client.membership.user.email, PASSWORD)
