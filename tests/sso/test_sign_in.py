"""Single sign-on end to end through HTTP, against a real OpenID Connect provider on loopback
(tests/oidc_provider.py): initiate, the provider, the callback, the console session; just-in-time
membership; and every refusal (domain, unverified email, state, nonce, signature, plan)."""

from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from allauth.socialaccount.models import SocialAccount, SocialApp
from django.utils import timezone

from apps.accounts.models import User
from apps.console.access import SESSION_ORGANIZATION
from apps.organizations.models import Membership, Organization
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.oidc_provider import IdpUser
from tests.sso.flow import (
    INITIATE,
    browser,
    callback_of,
    confirm,
    connect,
    initiate,
    open_url,
    signed_in_user_id,
    sso_through_api,
    sso_through_console,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(oidc_provider):
    organization = OrganizationFactory(name="Acme", slug="acme", plan="growth")
    MembershipFactory(organization=organization, role="owner")
    return connect(organization, oidc_provider, default_role="admin")


def test_initiate_answers_the_providers_url_with_state_nonce_and_pkce(api_client, acme, oidc_provider):
    url = initiate(api_client, email="Alice@ACME.test")
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{oidc_provider.issuer}/authorize"
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    assert query["client_id"] == oidc_provider.client_id
    assert query["response_type"] == "code"
    assert set(query["scope"].split()) == {"openid", "email", "profile"}
    assert query["redirect_uri"] == f"http://testserver/console/auth/sso/{acme.id}/callback/"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) >= 43
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32
    assert query["login_hint"] == "Alice@ACME.test"
    assert oidc_provider.client_secret not in url


def test_a_sign_in_started_through_the_api_signs_a_new_person_in_with_the_connections_role(
    api_client, acme, oidc_provider
):
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 302 and response["Location"] == "/console/"
    user = User.objects.get(email="alice@acme.test")
    assert signed_in_user_id(client) == str(user.pk)
    assert not user.has_usable_password()  # just in time: no password, single sign-on only
    membership = Membership.objects.get(user=user)
    assert (membership.organization_id, membership.role) == (acme.organization_id, "admin")
    assert client.session[SESSION_ORGANIZATION] == str(acme.organization_id)
    page = client.get("/console/account/").content.decode()
    assert "alice@acme.test" in page and "Acme" in page
    # PKCE: the token endpoint got the verifier; the secret was never copied to allauth's table.
    assert oidc_provider.token_requests[-1]["code_verifier"]
    assert SocialApp.objects.count() == 0
    assert SocialAccount.objects.get(user=user).provider == str(acme.id)


def test_the_console_button_signs_in_in_the_same_browser(acme, oidc_provider):
    client = browser()
    response = sso_through_console(client, oidc_provider)
    assert response.status_code == 302 and response["Location"] == "/console/"
    assert signed_in_user_id(client) == str(User.objects.get(email="alice@acme.test").pk)


def test_an_existing_member_keeps_their_account_password_and_role(api_client, acme, oidc_provider):
    owner = MembershipFactory(
        organization=acme.organization, user=UserFactory(email="carol@acme.test"), role="owner"
    )
    oidc_provider.user = IdpUser(sub="carol-sub", email="carol@acme.test")
    client = browser()
    sso_through_api(api_client, oidc_provider, client, email="carol@acme.test")
    assert signed_in_user_id(client) == str(owner.user_id)
    owner.refresh_from_db()
    assert owner.role == "owner" and owner.user.has_usable_password()
    # The second time the account is found by the link, not the email.
    client = browser()
    sso_through_api(api_client, oidc_provider, client, email="carol@acme.test")
    assert signed_in_user_id(client) == str(owner.user_id)
    assert SocialAccount.objects.filter(user=owner.user).count() == 1


def test_an_account_of_another_organization_is_never_signed_in_through_this_connection(
    api_client, acme, oidc_provider
):
    """A domain claim proves nothing: the owner of another organization, whose address is in the
    claimed domain, must not be handed to whoever runs this connection's identity provider."""
    elsewhere = MembershipFactory(user=UserFactory(email="alice@acme.test"), role="owner")
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 403
    assert "not a member of Acme" in response.content.decode()
    assert signed_in_user_id(client) is None
    assert not Membership.objects.filter(user=elsewhere.user, organization=acme.organization).exists()
    assert not SocialAccount.objects.filter(user=elsewhere.user).exists()


def test_the_gateways_staff_never_sign_in_through_an_organizations_identity_provider(
    api_client, acme, oidc_provider
):
    staff = UserFactory(email="alice@acme.test", is_staff=True, is_superuser=True)
    MembershipFactory(user=staff, organization=acme.organization, role="owner")
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 403 and "belongs to the gateway" in response.content.decode()
    assert signed_in_user_id(client) is None


def test_a_single_sign_on_session_stays_in_the_connections_organization(api_client, acme, oidc_provider):
    person = UserFactory(email="alice@acme.test")
    MembershipFactory(user=person, organization=acme.organization, role="member")
    other = MembershipFactory(user=person, role="owner").organization
    client = browser()
    sso_through_api(api_client, oidc_provider, client)
    assert signed_in_user_id(client) == str(person.pk)
    assert client.session[SESSION_ORGANIZATION] == str(acme.organization_id)
    page = client.get("/console/api-keys/").content.decode()
    assert other.name not in page  # not even offered in the organization switch
    token = client.get("/console/api-keys/").cookies.get("csrftoken") or client.cookies["csrftoken"]
    client.post(
        "/console/organization/", {"organization_id": str(other.id), "csrfmiddlewaretoken": token.value}
    )
    assert client.session[SESSION_ORGANIZATION] == str(acme.organization_id)
    assert "Acme" in client.get("/console/api-keys/").content.decode()


def test_initiate_by_organization_slug_or_id(api_client, acme, oidc_provider):
    for reference in ("acme", str(acme.organization_id)):
        url = initiate(api_client, organization=reference)
        assert url.startswith(f"{oidc_provider.issuer}/authorize?")
        assert "login_hint" not in url


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"email": "alice@unknown.test"}, 404, "sso_connection_not_found"),
        ({"email": "not-an-address"}, 404, "sso_connection_not_found"),
        ({"organization": "no-such-organization"}, 404, "sso_connection_not_found"),
        ({"organization": "00000000-0000-0000-0000-000000000000"}, 404, "sso_connection_not_found"),
        ({}, 400, "validation_error"),
        ({"email": "alice@acme.test", "organization": "acme"}, 400, "validation_error"),
        ({"email": "alice@acme.test", "extra": 1}, 400, "validation_error"),
        ({"email": 5}, 400, "validation_error"),
    ],
)
def test_initiate_refuses_what_it_cannot_start(api_client, acme, body, status, code):
    response = api_client.post(INITIATE, body, format="json")
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code


def test_an_organization_without_a_connection_answers_like_an_unknown_one(api_client, acme):
    OrganizationFactory(name="Quiet", slug="quiet")
    response = api_client.post(INITIATE, {"organization": "quiet"}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "sso_connection_not_found"
    acme.is_active = False
    acme.save(update_fields=["is_active"])
    assert api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json").status_code == 404


def test_an_organization_with_several_connections_asks_for_the_email(api_client, acme, oidc_provider):
    connect(acme.organization, oidc_provider, name="Second", allowed_domains=["acme-labs.test"])
    response = api_client.post(INITIATE, {"organization": "acme"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "sso_email_required"
    assert initiate(api_client, email="bob@acme-labs.test").startswith(oidc_provider.issuer)


def test_the_free_plan_is_refused_at_initiate_and_at_the_callback(api_client, acme, oidc_provider):
    url = initiate(api_client, email="alice@acme.test")  # started while on a paid plan
    Organization.objects.filter(pk=acme.organization_id).update(plan="free")
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "plan_required"
    client = browser()
    response = client.post("/console/login/sso/", {"email": "alice@acme.test"})
    assert response.status_code == 403  # without CSRF first
    response = confirm(client, open_url(client, callback_of(oidc_provider, url)))
    assert response.status_code == 403
    assert "growth or enterprise" in response.content.decode()
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="alice@acme.test").exists()


def test_the_console_button_says_why_it_cannot_start(acme, oidc_provider):
    from tests.console.conftest import csrf_token

    client = browser()
    response = client.post(
        "/console/login/sso/",
        {"email": "alice@elsewhere.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    assert response.status_code == 404
    assert "No single sign-on connection" in response.content.decode()
    Organization.objects.filter(pk=acme.organization_id).update(plan="free")
    response = client.post(
        "/console/login/sso/",
        {"email": "alice@acme.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    assert response.status_code == 403 and "growth or enterprise" in response.content.decode()


def test_an_email_outside_the_allowed_domains_is_refused_and_nothing_is_made(api_client, acme, oidc_provider):
    oidc_provider.user = IdpUser(sub="mallory", email="mallory@evil.test")
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 403
    assert "evil.test is not one of the email domains" in response.content.decode()
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="mallory@evil.test").exists()
    assert not SocialAccount.objects.exists()


@pytest.mark.parametrize("verified", [False, None, "false"])
def test_an_email_the_provider_has_not_verified_is_refused(api_client, acme, oidc_provider, verified):
    oidc_provider.user = IdpUser(email_verified=verified)
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 403
    assert "has not verified alice@acme.test" in response.content.decode()
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="alice@acme.test").exists()


def test_a_forged_state_is_refused(api_client, acme, oidc_provider):
    callback = callback_of(oidc_provider, initiate(api_client, email="alice@acme.test"))
    client = browser()
    forged = callback.replace("state=", "state=forged")
    response = open_url(client, forged)
    assert response.status_code == 401
    assert "Single sign-on failed" in response.content.decode()
    assert signed_in_user_id(client) is None
    parts = urlsplit(callback)
    no_state = f"{parts.path}?code={parse_qs(parts.query)['code'][0]}"
    assert open_url(client, no_state).status_code == 401
    assert signed_in_user_id(client) is None


def test_a_replayed_callback_is_refused(api_client, acme, oidc_provider):
    callback = callback_of(oidc_provider, initiate(api_client, email="alice@acme.test"))
    first = browser()
    assert confirm(first, open_url(first, callback)).status_code == 302
    thief = browser()
    response = open_url(thief, callback)
    assert response.status_code == 401  # no confirmation offered: the state is used
    assert signed_in_user_id(thief) is None


def test_a_sign_in_started_through_the_api_asks_the_browser_to_confirm_before_signing_in(
    api_client, acme, oidc_provider
):
    """Login CSRF: a callback address someone else started must not sign this browser in unasked."""
    client = browser()
    response = open_url(client, callback_of(oidc_provider, initiate(api_client, email="alice@acme.test")))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Finish signing in" in page and "Acme" in page
    assert signed_in_user_id(client) is None and not User.objects.filter(email="alice@acme.test").exists()
    # A forged POST (no CSRF token) does not confirm it.
    assert client.post(response.wsgi_request.get_full_path()).status_code == 403
    assert signed_in_user_id(client) is None
    assert confirm(client, response).status_code == 302
    assert signed_in_user_id(client) is not None


def test_a_replayed_console_callback_is_refused_in_the_same_browser(acme, oidc_provider):
    from tests.console.conftest import csrf_token

    client = browser()
    response = client.post(
        "/console/login/sso/",
        {"email": "alice@acme.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    callback = callback_of(oidc_provider, response["Location"])
    assert open_url(client, callback).status_code == 302
    client.logout()
    assert open_url(client, callback).status_code == 401
    assert signed_in_user_id(client) is None


def test_a_state_of_another_connection_is_refused(api_client, acme, oidc_provider):
    other = connect(OrganizationFactory(plan="enterprise"), oidc_provider, allowed_domains=["other.test"])
    callback = callback_of(oidc_provider, initiate(api_client, email="bob@other.test"))
    client = browser()
    response = open_url(client, callback.replace(str(other.id), str(acme.id)))
    assert response.status_code == 401
    assert signed_in_user_id(client) is None


def test_an_expired_state_is_refused(api_client, acme, oidc_provider):
    callback = callback_of(oidc_provider, initiate(api_client, email="alice@acme.test"))
    client = browser()
    with time_machine.travel(timezone.now() + timezone.timedelta(minutes=11), tick=False):
        response = open_url(client, callback)
    assert response.status_code == 401
    assert signed_in_user_id(client) is None


def test_an_id_token_with_another_nonce_is_refused(api_client, acme, oidc_provider):
    oidc_provider.id_token_claims = {"nonce": "not-the-one-sent"}
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 401
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="alice@acme.test").exists()


def test_an_id_token_the_issuers_keys_do_not_verify_is_refused(api_client, acme, oidc_provider):
    oidc_provider.sign_with_unknown_key = True
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 401
    assert signed_in_user_id(client) is None


def test_a_sign_in_the_person_cancels_at_the_provider_signs_nothing_in(acme, oidc_provider):
    from tests.console.conftest import csrf_token

    client = browser()
    response = client.post(
        "/console/login/sso/",
        {"email": "alice@acme.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    state = parse_qs(urlsplit(response["Location"]).query)["state"][0]
    response = client.get(
        f"/console/auth/sso/{acme.id}/callback/", {"state": state, "error": "access_denied"}
    )
    assert response.status_code == 302 and response["Location"] == "/console/auth/sso/login/cancelled/"
    assert client.get(response["Location"]).status_code == 200
    assert signed_in_user_id(client) is None


def test_an_unknown_or_inactive_connections_callback_answers_404(acme):
    client = browser()
    assert client.get("/console/auth/sso/00000000-0000-0000-0000-000000000000/callback/").status_code == 404
    acme.is_active = False
    acme.save(update_fields=["is_active"])
    assert client.get(f"/console/auth/sso/{acme.id}/callback/", {"state": "x" * 40}).status_code == 404


def test_an_unreachable_provider_answers_503(api_client, acme, oidc_provider, settings):
    from apps.sso.models import SsoConnection

    SsoConnection.objects.filter(pk=acme.pk).update(issuer="https://127.0.0.1:9")
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "sso_provider_unavailable"


def test_a_discovery_document_naming_another_issuer_is_refused(api_client, acme, oidc_provider):
    from apps.sso.models import SsoConnection

    SsoConnection.objects.filter(pk=acme.pk).update(issuer=oidc_provider.issuer + "/")
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert response.status_code == 503
