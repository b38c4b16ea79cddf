"""SAML 2.0 single sign-on end to end through HTTP, against a real SAML identity provider on loopback
(tests/saml_provider.py): initiate (the API, the console's button), the AuthnRequest, the signed
response posted to the ACS, the console session and just-in-time membership; and the refusals: a
domain outside the list, a tampered (badly signed) response, one signed with another key, a replay,
another audience, an expired one, one that answers no sign-in of ours, the free plan."""

import base64
import functools
import re
import zlib
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from allauth.socialaccount.models import SocialAccount, SocialApp

from apps.accounts.models import User
from apps.console.access import SESSION_ORGANIZATION
from apps.organizations.models import Membership, Organization
from apps.sso import services
from tests.console.conftest import csrf_token
from tests.factories import MembershipFactory, OrganizationFactory
from tests.sso.flow import INITIATE, browser, initiate, prove_domains, signed_in_user_id

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="session")
def _saml_identity_provider():
    from tests.saml_provider import SamlProvider

    provider = SamlProvider().start()
    yield provider
    provider.stop()


@pytest.fixture
def idp(_saml_identity_provider):
    _saml_identity_provider.reset()
    return _saml_identity_provider


@pytest.fixture
def acme(idp):
    organization = OrganizationFactory(name="Acme", slug="acme", plan="growth")
    MembershipFactory(organization=organization, role="owner")
    connection = services.sso_connection_create(
        organization=organization,
        data=dict(
            name="Acme SAML",
            protocol="saml",
            idp_entity_id=idp.entity_id,
            idp_sso_url=idp.sso_url,
            idp_certificate=idp.certificate,
            allowed_domains=["acme.test"],
            default_role="admin",
        ),
    )
    prove_domains(connection)
    return connection


def at_idp(idp, url: str) -> dict:
    """What the identity provider's page posts: the form's action and fields."""
    session = requests.Session()
    session.request = functools.partial(session.request, verify=idp.ca_bundle, timeout=10)
    response = session.get(url)
    assert response.status_code == 200, response.text
    page = response.text
    action = unescape(re.search(r'<form method="post" action="([^"]+)"', page).group(1))
    fields = {name: unescape(value) for name, value in re.findall(r'name="([^"]+)" value="([^"]*)"', page)}
    return {"action": action, "fields": fields}


def post_to_acs(client, posted: dict):
    """The browser posting the identity provider's form to the ACS, then following to its finish."""
    response = client.post(urlsplit(posted["action"]).path, posted["fields"])
    assert response.status_code == 302, response.content
    return client.get(response["Location"])


def confirm(client, response):
    """A sign-in started through the API asks this browser to confirm it (login CSRF)."""
    assert response.status_code == 200 and b"Finish signing in" in response.content, response.content
    path = response.wsgi_request.path
    return client.post(path, {"csrfmiddlewaretoken": csrf_token(client, path)})


def through_api(api_client, idp, client, email="alice@acme.test"):
    return confirm(client, post_to_acs(client, at_idp(idp, initiate(api_client, email=email))))


def authn_request(url: str) -> str:
    query = parse_qs(urlsplit(url).query)
    return zlib.decompress(base64.b64decode(query["SAMLRequest"][0]), -15).decode()


def refused(response, reason: str) -> None:
    assert response.status_code in (401, 403), (response.status_code, response.content)
    assert reason in response.content.decode(), response.content.decode()


def test_initiate_answers_the_identity_providers_url_with_an_authn_request(api_client, acme, idp):
    url = initiate(api_client, email="alice@acme.test")
    assert url.startswith(f"{idp.sso_url}?SAMLRequest=")
    request = authn_request(url)
    assert f'AssertionConsumerServiceURL="http://testserver/console/auth/sso/saml/{acme.id}/acs/"' in request
    assert (
        f"<saml:Issuer>http://testserver/console/auth/sso/saml/{acme.id}/metadata/</saml:Issuer>" in request
    )
    assert f'Destination="{idp.sso_url}"' in request


def test_a_sign_in_started_through_the_api_signs_a_new_person_in_with_the_connections_role(
    api_client, acme, idp
):
    client = browser()
    response = through_api(api_client, idp, client)
    assert response.status_code == 302 and response["Location"] == "/console/"
    user = User.objects.get(email="alice@acme.test")
    assert signed_in_user_id(client) == str(user.pk)
    assert not user.has_usable_password()
    membership = Membership.objects.get(user=user)
    assert (membership.organization_id, membership.role) == (acme.organization_id, "admin")
    assert client.session[SESSION_ORGANIZATION] == str(acme.organization_id)
    assert SocialApp.objects.count() == 0
    account = SocialAccount.objects.get(user=user)
    assert (account.provider, account.uid) == (str(acme.id), "alice@acme.test")
    # A second sign-in finds the person by the link and keeps their role.
    Membership.objects.filter(user=user).update(role="member")
    again = browser()
    assert through_api(api_client, idp, again).status_code == 302
    assert signed_in_user_id(again) == str(user.pk)
    assert Membership.objects.get(user=user).role == "member"


def test_the_console_button_signs_in_in_the_same_browser_without_asking_again(acme, idp):
    client = browser()
    response = client.post(
        "/console/login/sso/",
        {"email": "alice@acme.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    assert response.status_code == 302 and response["Location"].startswith(idp.sso_url)
    answer = post_to_acs(client, at_idp(idp, response["Location"]))
    assert answer.status_code == 302 and answer["Location"] == "/console/"
    assert signed_in_user_id(client) == str(User.objects.get(email="alice@acme.test").pk)


def test_the_confirmation_is_needed_a_get_of_the_finish_alone_signs_no_one_in(api_client, acme, idp):
    client = browser()
    page = post_to_acs(client, at_idp(idp, initiate(api_client, email="alice@acme.test")))
    assert b"Finish signing in" in page.content and b"Acme" in page.content
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="alice@acme.test").exists()
    # Without the CSRF token the confirmation is refused.
    assert client.post(page.wsgi_request.path).status_code == 403
    assert signed_in_user_id(client) is None


def test_an_email_domain_outside_the_list_is_refused(api_client, acme, idp):
    idp.email = "mallory@elsewhere.test"
    client = browser()
    refused(through_api(api_client, idp, client), "elsewhere.test is not one of the email domains")
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="mallory@elsewhere.test").exists()


def test_a_tampered_response_is_refused(api_client, acme, idp):
    client = browser()
    posted = at_idp(idp, initiate(api_client, email="alice@acme.test"))
    xml = base64.b64decode(posted["fields"]["SAMLResponse"]).decode()
    assert "alice@acme.test" in xml
    tampered = xml.replace("alice@acme.test", "owner@acme.test")
    posted["fields"]["SAMLResponse"] = base64.b64encode(tampered.encode()).decode()
    refused(post_to_acs(client, posted), "signature does not verify")
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email__in=["alice@acme.test", "owner@acme.test"]).exists()


def test_a_response_signed_with_another_key_is_refused(api_client, acme, idp):
    idp.sign_with_unknown_key = True
    client = browser()
    refused(
        post_to_acs(client, at_idp(idp, initiate(api_client, email="alice@acme.test"))),
        "signature does not verify",
    )
    assert signed_in_user_id(client) is None


def test_an_unsigned_response_is_refused(api_client, acme, idp):
    client = browser()
    posted = at_idp(idp, initiate(api_client, email="alice@acme.test"))
    xml = base64.b64decode(posted["fields"]["SAMLResponse"]).decode()
    unsigned = re.sub(r"<ds:Signature.*?</ds:Signature>", "", xml, flags=re.S)
    assert unsigned != xml
    posted["fields"]["SAMLResponse"] = base64.b64encode(unsigned.encode()).decode()
    refused(post_to_acs(client, posted), "was refused")
    assert signed_in_user_id(client) is None


def test_a_replayed_response_is_refused(api_client, acme, idp):
    posted = at_idp(idp, initiate(api_client, email="alice@acme.test"))
    first = browser()
    assert confirm(first, post_to_acs(first, posted)).status_code == 302
    assert signed_in_user_id(first) is not None
    for client in (browser(), first):  # another browser, and the same one again
        response = post_to_acs(client, posted)
        refused(response, "does not answer a sign-in started here")
    assert signed_in_user_id(browser()) is None


def test_a_replayed_console_response_is_refused_in_the_same_browser(acme, idp):
    client = browser()
    start = client.post(
        "/console/login/sso/",
        {"email": "alice@acme.test", "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )
    posted = at_idp(idp, start["Location"])
    assert post_to_acs(client, posted).status_code == 302
    other = browser()
    refused(post_to_acs(other, posted), "does not answer a sign-in started here")
    assert signed_in_user_id(other) is None


def test_a_response_for_another_audience_is_refused(api_client, acme, idp):
    idp.audience = "https://another-service.example.com/saml/metadata"
    client = browser()
    refused(
        post_to_acs(client, at_idp(idp, initiate(api_client, email="alice@acme.test"))),
        "another service provider",
    )
    assert signed_in_user_id(client) is None


def test_an_expired_response_is_refused(api_client, acme, idp):
    idp.valid_for = -600
    client = browser()
    refused(post_to_acs(client, at_idp(idp, initiate(api_client, email="alice@acme.test"))), "was refused")
    assert signed_in_user_id(client) is None


def test_a_response_to_no_request_of_ours_is_refused(api_client, acme, idp):
    idp.in_response_to = "ONELOGIN_0123456789abcdef0123456789abcdef01234567"
    client = browser()
    refused(
        post_to_acs(client, at_idp(idp, initiate(api_client, email="alice@acme.test"))),
        "does not answer a sign-in started here",
    )
    assert signed_in_user_id(client) is None


def test_another_connections_response_is_refused(api_client, acme, idp):
    posted = at_idp(idp, initiate(api_client, email="alice@acme.test"))
    other = services.sso_connection_create(
        organization=OrganizationFactory(plan="enterprise"),
        data=dict(
            name="Other",
            protocol="saml",
            idp_entity_id=idp.entity_id,
            idp_sso_url=idp.sso_url,
            idp_certificate=idp.certificate,
            allowed_domains=["other.test"],
        ),
    )
    posted["action"] = posted["action"].replace(str(acme.id), str(other.id))
    client = browser()
    response = post_to_acs(client, posted)
    assert response.status_code == 401  # destination and audience are the other connection's
    assert signed_in_user_id(client) is None


def test_the_free_plan_is_refused_at_initiate_and_at_the_acs(api_client, acme, idp):
    posted = at_idp(idp, initiate(api_client, email="alice@acme.test"))  # started on a paid plan
    Organization.objects.filter(pk=acme.organization_id).update(plan="free")
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "plan_required"
    client = browser()
    refused(confirm(client, post_to_acs(client, posted)), "growth or enterprise plan")
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="alice@acme.test").exists()


def test_the_service_providers_metadata_names_the_entity_id_and_acs(acme):
    response = browser().get(f"/console/auth/sso/saml/{acme.id}/metadata/")
    assert response.status_code == 200
    body = response.content.decode()
    assert f'entityID="http://testserver/console/auth/sso/saml/{acme.id}/metadata/"' in body
    assert f'Location="http://testserver/console/auth/sso/saml/{acme.id}/acs/"' in body


def test_an_inactive_or_unknown_connections_urls_answer_404(acme):
    services.sso_connection_update(connection=acme, data={"is_active": False})
    assert browser().get(f"/console/auth/sso/saml/{acme.id}/metadata/").status_code == 404
    client = browser()
    response = client.post(f"/console/auth/sso/saml/{acme.id}/acs/", {"SAMLResponse": "x"})
    assert client.get(response["Location"]).status_code == 404
