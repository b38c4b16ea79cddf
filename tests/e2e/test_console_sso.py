"""In a browser: sign in to the console through a real OpenID Connect identity provider on loopback
(tests/oidc_provider.py: HTTPS with a test CA, PKCE, nonce), joining the organization just in time with
the connection's role."""

import pytest
from playwright.sync_api import expect

from apps.organizations.models import Membership
from apps.sso import services as sso
from tests.e2e.conftest import screenshot
from tests.oidc_provider import IdpUser, OidcProvider
from tests.servers import daphne_server
from tests.sso.flow import prove_domains

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_SECRET = "an-e2e-client-secret-4d2f"


@pytest.fixture(scope="module")
def identity_provider():
    with OidcProvider(client_id="gateway-e2e", client_secret=CLIENT_SECRET) as provider:
        yield provider


@pytest.fixture(scope="module")
def gateway(django_db_setup, static_root, tmp_path_factory, identity_provider) -> str:
    """A live gateway that trusts the identity provider's test CA, as a deployment would trust a
    private CA (``GATEWAY_SSO_CA_BUNDLE``), and may call it on loopback (``GATEWAY_ALLOW_PRIVATE_SSO``)."""
    with daphne_server(
        tmp_path_factory.mktemp("gateway"),
        STATIC_ROOT=str(static_root),
        GATEWAY_SSO_CA_BUNDLE=identity_provider.ca_bundle,
        GATEWAY_ALLOW_PRIVATE_SSO="true",
    ) as base_url:
        yield base_url


@pytest.fixture
def connection(organization, identity_provider):
    connection = sso.sso_connection_create(
        organization=organization,
        data=dict(
            name="Acme IdP",
            issuer=identity_provider.issuer,
            client_id="gateway-e2e",
            client_secret=CLIENT_SECRET,
            allowed_domains=["acme.test"],
            default_role="admin",
        ),
    )
    prove_domains(connection)  # routes nobody before it is proved (an operator's approval here)
    return connection


def test_a_new_person_signs_in_through_the_identity_provider_and_joins_as_an_admin(
    browser, gateway, organization, identity_provider, connection
):
    identity_provider.user = IdpUser(sub="idp-dana", email="dana@acme.test", email_verified=True)
    # The browser reaches the provider over HTTPS signed by the test CA, which it does not know.
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.goto(f"{gateway}/console/login/")
    page.get_by_label("Your work address").fill("dana@acme.test")
    page.get_by_role("button", name="Sign in with SSO").click()

    page.wait_for_url(f"{gateway}/console/**")
    expect(page.locator(".who .email")).to_have_text("dana@acme.test")
    expect(page.locator(".role")).to_have_text("admin")
    screenshot(page, "signed-in-through-sso")

    membership = Membership.objects.get(user__email="dana@acme.test")
    assert (membership.organization_id, membership.role) == (organization.id, "admin")
    assert not membership.user.has_usable_password()
    # The provider saw PKCE and a nonce, as the flow requires.
    authorization = identity_provider.authorization_requests[-1]
    assert authorization["code_challenge_method"] == "S256" and authorization["nonce"]
    context.close()


def test_an_address_outside_the_connections_domains_is_refused(
    browser, gateway, identity_provider, connection
):
    # The provider answers for someone whose address the connection does not allow.
    identity_provider.user = IdpUser(sub="idp-eve", email="eve@elsewhere.test", email_verified=True)
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    page.goto(f"{gateway}/console/login/")
    page.get_by_label("Your work address").fill("eve@acme.test")
    page.get_by_role("button", name="Sign in with SSO").click()
    expect(page.get_by_role("heading", name="Sign-in refused")).to_be_visible()
    expect(page.get_by_text("elsewhere.test is not one of the email domains")).to_be_visible()
    assert not Membership.objects.filter(user__email="eve@elsewhere.test").exists()
    screenshot(page, "sso-refused")
    context.close()
