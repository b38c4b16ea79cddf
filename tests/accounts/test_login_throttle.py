"""Failed sign-ins are counted once for every sign-in path: the management API's login and the admin
console's login page lock out the same account (and address), whichever path the guesses came from."""

import pytest
from django.conf import settings
from django.contrib.auth import authenticate
from django.test import Client

from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

WRONG = "not-the-password"


@pytest.fixture
def staff():
    """A member who may also use the admin console (the bootstrap owner is one)."""
    user = UserFactory(is_staff=True, is_superuser=True)
    MembershipFactory(user=user)
    return user


def admin_login(browser: Client, email: str, password: str):
    return browser.post("/admin/login/?next=/admin/", {"username": email, "password": password})


def api_login(api_client, email: str, password: str = PASSWORD):
    return api_client.post("/api/v1/auth/login", {"email": email, "password": password}, format="json")


def signed_in(browser: Client) -> bool:
    return "_auth_user_id" in browser.session


def test_the_admin_login_page_signs_in_with_the_right_password(staff):
    browser = Client()

    response = admin_login(browser, staff.email, PASSWORD)

    assert response.status_code == 302
    assert signed_in(browser)


def test_the_admin_login_page_refuses_even_the_right_password_after_too_many_failures(staff):
    browser = Client()
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        failed = admin_login(browser, staff.email, WRONG)
        assert failed.status_code == 200 and not signed_in(browser)

    response = admin_login(browser, staff.email, PASSWORD)

    assert response.status_code == 200
    assert not signed_in(browser)
    assert b"Too many failed sign-in attempts" in response.content


def test_failures_on_the_admin_login_page_lock_the_api_login(staff, api_client):
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        admin_login(Client(), staff.email, WRONG)

    response = api_login(api_client, staff.email)

    error = assert_error(response, 429, "too_many_login_attempts")
    assert error["type"] == "rate_limit_error"
    assert int(response["Retry-After"]) > 0
    assert "access" not in response.json()


def test_failures_on_the_api_login_lock_the_admin_login_page(staff, api_client):
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        assert api_login(api_client, staff.email, WRONG).status_code == 401
    browser = Client()

    response = admin_login(browser, staff.email, PASSWORD)

    assert not signed_in(browser)
    assert b"Too many failed sign-in attempts" in response.content


def test_failures_from_one_address_across_accounts_lock_that_address_on_both_paths(staff, api_client):
    for i in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4):
        admin_login(Client(), f"guess-{i}@example.com", WRONG)

    assert_error(api_login(api_client, staff.email), 429, "too_many_login_attempts")
    elsewhere = Client(REMOTE_ADDR="192.0.2.44")
    assert admin_login(elsewhere, staff.email, PASSWORD).status_code == 302


def test_the_admin_login_page_counts_a_failure_for_an_unknown_account_too(staff, api_client):
    """Guessing which emails exist must cost as much as guessing passwords."""
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        admin_login(Client(), "nobody@example.com", WRONG)

    assert_error(api_login(api_client, "nobody@example.com", WRONG), 429, "too_many_login_attempts")


def test_a_successful_sign_in_on_either_path_clears_the_accounts_failures(staff, api_client):
    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT - 1):
        admin_login(Client(), staff.email, WRONG)
    assert api_login(api_client, staff.email).status_code == 200

    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT - 1):
        api_login(api_client, staff.email, WRONG)

    assert admin_login(Client(), staff.email, PASSWORD).status_code == 302


def test_sign_ins_without_a_request_count_against_the_account_but_share_no_address(staff, api_client):
    for i in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4):
        assert authenticate(username=f"guess-{i}@example.com", password=WRONG) is None
    assert authenticate(username=staff.email, password=PASSWORD) == staff

    for _ in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT):
        authenticate(username=staff.email, password=WRONG)

    assert authenticate(username=staff.email, password=PASSWORD) is None
    assert_error(api_login(api_client, staff.email), 429, "too_many_login_attempts")


def test_failures_from_one_ipv6_slash_64_count_as_one_address(staff, api_client):
    """One IPv6 subscriber gets a whole /64: a new address for every guess must not escape the limit."""
    for i in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4):
        admin_login(Client(REMOTE_ADDR=f"2001:db8:1:2::{i + 1:x}"), f"guess-{i}@example.com", WRONG)

    same_network = api_client.post(
        "/api/v1/auth/login",
        {"email": staff.email, "password": PASSWORD},
        format="json",
        REMOTE_ADDR="2001:db8:1:2:ffff:ffff:ffff:fffe",
    )
    assert_error(same_network, 429, "too_many_login_attempts")
    assert admin_login(Client(REMOTE_ADDR="2001:db8:1:3::1"), staff.email, PASSWORD).status_code == 302
    assert admin_login(Client(REMOTE_ADDR="192.0.2.44"), staff.email, PASSWORD).status_code == 302


def test_failures_from_ipv4_addresses_count_per_address(staff):
    for i in range(settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4):
        admin_login(Client(REMOTE_ADDR="198.51.100.7"), f"guess-{i}@example.com", WRONG)

    assert b"Too many" in admin_login(Client(REMOTE_ADDR="198.51.100.7"), staff.email, PASSWORD).content
    assert admin_login(Client(REMOTE_ADDR="198.51.100.8"), staff.email, PASSWORD).status_code == 302
