"""Password sign-in around single sign-on: two-factor (TOTP and recovery codes) on the console and the
API, ``require_sso`` with the owners' break-glass, the shared lock-out (console, /admin/login, API),
no sign-up, sign-out by POST, and the session tokens page."""

import re
import time

import pytest
import time_machine
from allauth.mfa.models import Authenticator
from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from allauth.mfa.totp.internal.auth import TOTP, format_hotp_value, generate_totp_secret, hotp_value
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.sso import services
from tests.console.conftest import csrf_token
from tests.factories import PASSWORD, MembershipFactory, OrganizationFactory, UserFactory
from tests.sso.flow import browser, form_value, password_sign_in, prove_domains, signed_in_user_id

pytestmark = pytest.mark.django_db

LOGIN = "/api/v1/auth/login"
MFA = "/console/auth/2fa/authenticate/"


def totp_code(secret: str, *, at: float | None = None) -> str:
    return format_hotp_value(hotp_value(secret, int(at if at is not None else time.time()) // 30))


def with_two_factor(user) -> tuple[str, list[str]]:
    """TOTP and recovery codes set up for ``user`` (as the console's pages do): (secret, codes)."""
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    codes = RecoveryCodes.activate(user).generate_codes()
    return secret, codes


def answer_code(client, code: str):
    return client.post(MFA, {"code": code, "csrfmiddlewaretoken": csrf_token(client, MFA)})


def sign_out(client) -> None:
    response = client.post("/console/logout/", {"csrfmiddlewaretoken": client.cookies["csrftoken"].value})
    assert response.status_code == 302


@pytest.fixture
def acme():
    return OrganizationFactory(name="Acme", slug="acme", plan="growth")


def member_of(organization, email: str, role: str = "member"):
    return MembershipFactory(organization=organization, user=UserFactory(email=email), role=role)


def require_sso(organization, *, domains=("acme.test",), required=True, proved=True):
    connection = services.sso_connection_create(
        organization=organization,
        data=dict(
            name="Acme IdP",
            issuer="https://login.acme.test",
            client_id="gateway",
            client_secret="a-client-secret-for-require-sso",
            allowed_domains=list(domains),
            require_sso=required,
        ),
    )
    if proved:
        prove_domains(connection)
    return connection


# --- Two-factor ---------------------------------------------------------------------------------


def test_two_factor_is_set_up_in_the_console_and_asked_at_the_next_sign_in(acme):
    user = member_of(acme, "dana@acme.test").user
    client = browser()
    with time_machine.travel(timezone.now(), tick=True) as clock:
        assert password_sign_in(client, user.email, PASSWORD)["Location"] == "/console/"
        assert "Set up two-factor" in client.get("/console/account/").content.decode()

        # Setting it up asks for the password again first.
        response = client.get("/console/auth/2fa/totp/activate/")
        assert response.status_code == 302
        assert response["Location"].startswith("/console/auth/reauthenticate/")
        response = client.post(
            "/console/auth/reauthenticate/?next=/console/auth/2fa/totp/activate/",
            {
                "password": PASSWORD,
                "next": "/console/auth/2fa/totp/activate/",
                "csrfmiddlewaretoken": csrf_token(client, "/console/auth/reauthenticate/"),
            },
        )
        assert response["Location"] == "/console/auth/2fa/totp/activate/"
        response = client.get("/console/auth/2fa/totp/activate/")
        assert "no-store" in response["Cache-Control"]  # it shows the secret
        page = response.content.decode()
        # allauth's page, with the console's navigation (registered by apps/console/apps.py).
        assert f'<a class="email" href="/console/account/">{user.email}</a>' in page
        secret = form_value(page, "totp-secret")
        assert "data:image/svg+xml;base64," in page

        token = client.cookies["csrftoken"].value  # another GET would show another secret
        response = client.post(
            "/console/auth/2fa/totp/activate/", {"code": "000000", "csrfmiddlewaretoken": token}
        )
        assert response.status_code == 200 and not Authenticator.objects.filter(user=user).exists()
        response = client.post(
            "/console/auth/2fa/totp/activate/", {"code": totp_code(secret), "csrfmiddlewaretoken": token}
        )
        assert response["Location"] == "/console/auth/2fa/recovery-codes/"
        response = client.get("/console/auth/2fa/recovery-codes/")
        assert "no-store" in response["Cache-Control"]
        page = response.content.decode()
        codes = re.findall(r"<li><code>([0-9a-z]+)</code></li>", page)
        assert len(codes) == 10 and "shown only once" in page
        again = client.get("/console/auth/2fa/recovery-codes/").content.decode()
        assert not any(code in again for code in codes)  # never shown again
        stored = Authenticator.objects.get(user=user, type=Authenticator.Type.TOTP).data["secret"]
        assert secret not in stored  # encrypted at rest
        sign_out(client)

        # The password alone no longer signs in: the code is asked.
        response = password_sign_in(client, user.email, PASSWORD)
        assert response["Location"] == MFA and signed_in_user_id(client) is None
        response = answer_code(client, "123456" if totp_code(secret) != "123456" else "654321")
        assert response.status_code == 200 and "Incorrect code" in response.content.decode()
        assert signed_in_user_id(client) is None
        clock.shift(31)  # the set-up's code cannot be used twice
        response = answer_code(client, totp_code(secret))
        assert response["Location"] == "/console/" and signed_in_user_id(client) == str(user.pk)
        sign_out(client)

        # A recovery code signs in once.
        password_sign_in(client, user.email, PASSWORD)
        assert answer_code(client, codes[0])["Location"] == "/console/"
        sign_out(client)
        password_sign_in(client, user.email, PASSWORD)
        assert answer_code(client, codes[0]).status_code == 200
        assert signed_in_user_id(client) is None
        assert answer_code(client, codes[1])["Location"] == "/console/"


def test_the_api_login_asks_an_account_with_two_factor_for_its_code(acme, api_client, settings):
    settings.GATEWAY_LOGIN_FAILURE_LIMIT = 3
    user = member_of(acme, "erin@acme.test").user
    secret, codes = with_two_factor(user)
    response = api_client.post(LOGIN, {"email": user.email, "password": PASSWORD}, format="json")
    assert response.status_code == 401 and response.json()["error"]["code"] == "mfa_required"
    response = api_client.post(LOGIN, {"email": user.email, "password": PASSWORD, "code": "1"}, format="json")
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_mfa_code"
    body = {"email": user.email, "password": PASSWORD, "code": totp_code(secret)}
    assert api_client.post(LOGIN, body, format="json").status_code == 200
    body["code"] = codes[0]
    assert api_client.post(LOGIN, body, format="json").status_code == 200
    assert api_client.post(LOGIN, body, format="json").status_code == 401  # used up
    # Wrong codes count as failed sign-ins, and the right password does not reset the count between
    # them: after the third, the account is locked out.
    assert [api_client.post(LOGIN, body, format="json").status_code for _ in range(3)] == [401, 401, 429]


def test_wrong_codes_on_the_console_count_towards_the_lock_out(acme, settings):
    settings.GATEWAY_LOGIN_FAILURE_LIMIT = 2
    user = member_of(acme, "gus@acme.test").user
    with_two_factor(user)
    client = browser()
    password_sign_in(client, user.email, PASSWORD)
    for _ in range(2):
        assert answer_code(client, "99999999").status_code == 200
    response = password_sign_in(browser(), user.email, PASSWORD)
    assert "Too many failed sign-in attempts" in response.content.decode()


def test_two_factor_is_turned_off_from_the_console(acme):
    user = member_of(acme, "finn@acme.test").user
    secret, _ = with_two_factor(user)
    client = browser()
    with time_machine.travel(timezone.now(), tick=True):
        password_sign_in(client, user.email, PASSWORD)
        answer_code(client, totp_code(secret))
        response = client.get("/console/auth/2fa/totp/deactivate/")
        assert response["Location"].startswith("/console/auth/reauthenticate/")
        client.post(
            "/console/auth/reauthenticate/",
            {
                "password": PASSWORD,
                "csrfmiddlewaretoken": csrf_token(client, "/console/auth/reauthenticate/"),
            },
        )
        token = csrf_token(client, "/console/auth/2fa/totp/deactivate/")
        response = client.post("/console/auth/2fa/totp/deactivate/", {"csrfmiddlewaretoken": token})
        assert response.status_code == 302
    assert not Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()


# --- require_sso and the break-glass ------------------------------------------------------------


def test_require_sso_refuses_a_members_password_on_the_console_and_the_api(acme, api_client):
    member = member_of(acme, "bob@acme.test")
    require_sso(acme)
    client = browser()
    response = password_sign_in(client, member.user.email, PASSWORD)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Acme requires single sign-on" in page and "Sign in with SSO" in page
    assert signed_in_user_id(client) is None
    response = api_client.post(LOGIN, {"email": member.user.email, "password": PASSWORD}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "sso_required"
    # A wrong password is only "incorrect": the rule is told to whoever knows the password.
    response = password_sign_in(browser(), member.user.email, "wrong-password")
    assert "requires single sign-on" not in response.content.decode()


@pytest.mark.parametrize("role", ["member", "admin", "owner"])
def test_require_sso_refuses_every_role_without_two_factor(acme, api_client, role):
    person = member_of(acme, f"{role}@acme.test", role=role)
    require_sso(acme)
    assert password_sign_in(browser(), person.user.email, PASSWORD).status_code == 200
    response = api_client.post(LOGIN, {"email": person.user.email, "password": PASSWORD}, format="json")
    assert response.status_code == 403


def test_an_owner_with_two_factor_keeps_password_sign_in_as_the_break_glass(acme, api_client):
    owner = member_of(acme, "olive@acme.test", role="owner")
    secret, codes = with_two_factor(owner.user)
    require_sso(acme)
    client = browser()
    response = password_sign_in(client, owner.user.email, PASSWORD)
    assert response["Location"] == MFA and signed_in_user_id(client) is None
    assert answer_code(client, codes[0])["Location"] == "/console/"
    assert signed_in_user_id(client) == str(owner.user_id)
    response = api_client.post(LOGIN, {"email": owner.user.email, "password": PASSWORD}, format="json")
    assert response.status_code == 401 and response.json()["error"]["code"] == "mfa_required"
    body = {"email": owner.user.email, "password": PASSWORD, "code": totp_code(secret)}
    assert api_client.post(LOGIN, body, format="json").status_code == 200
    # An admin with two-factor is still refused: the break-glass is the owners'.
    admin = member_of(acme, "adam@acme.test", role="admin")
    with_two_factor(admin.user)
    assert password_sign_in(browser(), admin.user.email, PASSWORD).status_code == 200


def test_require_sso_leaves_alone_what_its_connection_does_not_claim(acme, api_client):
    contractor = member_of(acme, "casey@freelance.test")
    require_sso(acme)
    assert password_sign_in(browser(), contractor.user.email, PASSWORD)["Location"] == "/console/"
    # Another organization's member with an address of the claimed domain is not Acme's to refuse.
    stranger = member_of(OrganizationFactory(), "sam@acme.test")
    assert password_sign_in(browser(), stranger.user.email, PASSWORD)["Location"] == "/console/"


def test_password_sign_in_works_again_when_require_sso_is_off(acme):
    member = member_of(acme, "bob@acme.test")
    connection = require_sso(acme)
    assert password_sign_in(browser(), member.user.email, PASSWORD).status_code == 200
    services.sso_connection_update(connection=connection, data={"require_sso": False})
    assert password_sign_in(browser(), member.user.email, PASSWORD)["Location"] == "/console/"


# --- The shared lock-out --------------------------------------------------------------------------


def test_failures_on_the_console_lock_out_the_admin_login_and_the_api(acme, api_client, settings):
    settings.GATEWAY_LOGIN_FAILURE_LIMIT = 2
    staff = member_of(acme, "staff@acme.test", role="owner").user
    User.objects.filter(pk=staff.pk).update(is_staff=True, is_superuser=True)
    for _ in range(2):
        response = password_sign_in(browser(), staff.email, "wrong-password")
        assert "Email or password is incorrect." in response.content.decode()
    response = password_sign_in(browser(), staff.email, PASSWORD)
    assert "Too many failed sign-in attempts" in response.content.decode()
    admin = browser()
    response = admin.post(
        "/admin/login/?next=/admin/",
        {
            "username": staff.email,
            "password": PASSWORD,
            "csrfmiddlewaretoken": csrf_token(admin, "/admin/login/"),
        },
    )
    assert response.status_code == 200 and "Too many failed sign-in attempts" in response.content.decode()
    assert signed_in_user_id(admin) is None
    response = api_client.post(LOGIN, {"email": staff.email, "password": PASSWORD}, format="json")
    assert response.status_code == 429


def test_failures_on_the_admin_login_lock_out_the_console(acme, settings):
    settings.GATEWAY_LOGIN_FAILURE_LIMIT = 2
    person = member_of(acme, "gail@acme.test").user
    admin = browser()
    for _ in range(2):
        admin.post(
            "/admin/login/",
            {
                "username": person.email,
                "password": "wrong",
                "csrfmiddlewaretoken": csrf_token(admin, "/admin/login/"),
            },
        )
    client = browser()
    response = password_sign_in(client, person.email, PASSWORD)
    assert response.status_code == 200 and "Too many failed sign-in attempts" in response.content.decode()
    assert signed_in_user_id(client) is None


def test_the_console_sign_in_needs_its_csrf_token(acme):
    person = member_of(acme, "hal@acme.test").user
    client = browser()
    response = client.post("/console/login/", {"login": person.email, "password": PASSWORD})
    assert response.status_code == 403 and signed_in_user_id(client) is None


# --- No sign-up, sign-out -------------------------------------------------------------------------


def test_there_is_no_public_sign_up(acme):
    client = browser()
    assert "No sign-up here" in client.get("/console/auth/signup/").content.decode()
    client.post(
        "/console/auth/signup/",
        {
            "email": "new@acme.test",
            "password1": "a-brand-new-password",
            "csrfmiddlewaretoken": csrf_token(client, "/console/auth/signup/"),
        },
    )
    assert not User.objects.filter(email="new@acme.test").exists()
    for path in ("/console/auth/password/reset/", "/console/auth/email/", "/accounts/login/"):
        assert client.get(path).status_code == 404


def test_sign_out_is_a_post(acme):
    person = member_of(acme, "ivy@acme.test").user
    client = browser()
    password_sign_in(client, person.email, PASSWORD)
    assert client.get("/console/logout/").status_code == 200  # asks, signs nobody out
    assert signed_in_user_id(client) == str(person.pk)
    assert client.post("/console/logout/").status_code == 403  # CSRF
    sign_out(client)
    assert signed_in_user_id(client) is None
    assert client.get("/console/account/")["Location"].startswith("/console/login/")


# --- Session tokens for scripts -------------------------------------------------------------------


def test_a_signed_in_person_issues_session_tokens_for_scripts_shown_once(acme):
    member = member_of(acme, "jo@acme.test")
    client = browser()
    client.force_login(member.user)
    page = client.get("/console/account/tokens")
    assert page.status_code == 200 and "Issue a session token pair" in page.content.decode()
    assert client.post("/console/account/tokens").status_code == 403  # CSRF
    response = client.post(
        "/console/account/tokens", {"csrfmiddlewaretoken": csrf_token(client, "/console/account/tokens")}
    )
    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    content = response.content.decode()
    access, refresh = form_value(content, "access-token"), form_value(content, "refresh-token")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {access}")
    current = api.get("/api/v1/organizations/current")
    assert current.status_code == 200 and current.json()["id"] == str(acme.id)
    assert APIClient().post("/api/v1/auth/refresh", {"refresh": refresh}, format="json").status_code == 200
    assert access not in client.get("/console/account/tokens").content.decode()


def test_the_tokens_page_needs_a_session(acme):
    response = browser().get("/console/account/tokens")
    assert response.status_code == 302 and response["Location"].startswith("/console/login/")
