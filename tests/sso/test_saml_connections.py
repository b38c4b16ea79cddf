"""SAML 2.0 connections through the API and the console: their fields, the rules of each protocol,
owners only, tenancy, CSRF, the plan; the page shows what to register at the identity provider."""

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from apps.organizations.models import Organization
from apps.sso import services
from apps.sso.models import SsoConnection
from tests.console.conftest import post_form
from tests.factories import MembershipFactory
from tests.sso.conftest import CONNECTIONS, new_secret

pytestmark = pytest.mark.django_db

NEW = "/console/sso/new"


def certificate_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp.acme.test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


CERTIFICATE = certificate_pem()
BODY = "".join(CERTIFICATE.strip().splitlines()[1:-1])


def saml_body(**fields) -> dict:
    body = {
        "name": "Okta SAML",
        "protocol": "saml",
        "idp_entity_id": "http://www.okta.com/exk1a2b3c4",
        "idp_sso_url": "https://acme.okta.test/app/gateway/exk1a2b3c4/sso/saml",
        "idp_certificate": CERTIFICATE,
        "allowed_domains": ["acme.test"],
        "default_role": "admin",
    }
    body.update(fields)
    return body


def make(organization, **fields) -> SsoConnection:
    return services.sso_connection_create(organization=organization, data=saml_body(**fields))


def test_an_owner_creates_reads_changes_and_deletes_a_saml_connection(session_client):
    response = session_client.post(CONNECTIONS, saml_body(), format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["protocol"] == "saml"
    assert created["idp_entity_id"] == "http://www.okta.com/exk1a2b3c4"
    assert created["idp_certificate"] == BODY  # stored without the armour and line breaks
    assert (
        created["issuer"] is None and created["client_id"] is None and created["client_secret_hint"] is None
    )
    url = f"{CONNECTIONS}/{created['id']}"
    assert session_client.get(url).json() == created
    response = session_client.patch(url, {"idp_sso_url": "https://idp.acme.test/sso?tenant=7"}, format="json")
    assert response.status_code == 200 and response.json()["idp_sso_url"].endswith("?tenant=7")
    assert session_client.delete(url).status_code == 204
    assert not SsoConnection.objects.exists()


@pytest.mark.parametrize(
    "change, field",
    [
        ({"idp_entity_id": None}, "idp_entity_id"),  # missing
        ({"idp_sso_url": "http://idp.acme.test/sso"}, "idp_sso_url"),  # not https
        ({"idp_sso_url": "https://idp.acme.test/sso#frag"}, "idp_sso_url"),
        ({"idp_certificate": "not a certificate!"}, "idp_certificate"),
        ({"idp_entity_id": "has spaces in it"}, "idp_entity_id"),
        ({"client_secret": "a-secret-of-oidc"}, "client_secret"),  # the other protocol's field
        ({"issuer": "https://login.acme.test"}, "issuer"),
    ],
)
def test_bad_saml_input_is_a_400_naming_the_field(session_client, change, field):
    body = {name: value for name, value in saml_body(**change).items() if value is not None}
    response = session_client.post(CONNECTIONS, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert not SsoConnection.objects.exists()


def test_an_oidc_body_with_saml_fields_is_refused_and_neither_protocol_changes(session_client, organization):
    body = {
        "name": "Okta",
        "issuer": "https://login.acme.test",
        "client_id": "c",
        "client_secret": new_secret(),
        "allowed_domains": ["acme.test"],
        "idp_entity_id": "urn:x",
    }
    response = session_client.post(CONNECTIONS, body, format="json")
    assert response.status_code == 400 and "idp_entity_id" in response.json()["error"]["fields"]
    connection = make(organization)
    url = f"{CONNECTIONS}/{connection.id}"
    for change, field in (
        ({"protocol": "oidc"}, "protocol"),
        ({"client_id": "c"}, "client_id"),
        ({"issuer": "https://login.acme.test", "idp_entity_id": "urn:y"}, "issuer"),
    ):
        response = session_client.patch(url, change, format="json")
        assert response.status_code == 400, response.content
        assert field in response.json()["error"]["fields"]
    connection.refresh_from_db()
    assert connection.protocol == "saml" and connection.client_id == ""


def test_the_free_plan_cannot_create_a_saml_connection(session_client, organization):
    Organization.objects.filter(pk=organization.pk).update(plan="free")
    response = session_client.post(CONNECTIONS, saml_body(), format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "plan_required"


def test_admins_cannot_read_or_write_saml_connections(api_client, organization):
    from tests.conftest import login

    admin = MembershipFactory(organization=organization, role="admin")
    connection = make(organization)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(api_client, admin.user.email)['access']}")
    assert api_client.get(f"{CONNECTIONS}/{connection.id}").status_code == 403
    response = api_client.patch(f"{CONNECTIONS}/{connection.id}", {"name": "x"}, format="json")
    assert response.status_code == 403
    assert SsoConnection.objects.get().name == "Okta SAML"


# The console's page.


@pytest.fixture
def owner_console(console_for, organization):
    return console_for(organization, "owner")


def form(**fields) -> dict:
    data = {
        "name": "Okta SAML",
        "protocol": "saml",
        "idp_entity_id": "http://www.okta.com/exk1a2b3c4",
        "idp_sso_url": "https://acme.okta.test/sso/saml",
        "idp_certificate": CERTIFICATE,
        # The OIDC fields of the same form, left empty, are not this protocol's: ignored.
        "issuer": "",
        "client_id": "",
        "client_secret": "",
        "allowed_domains": "acme.test",
        "default_role": "member",
        "is_active": ["false", "true"],
        "require_sso": "false",
    }
    data.update(fields)
    return data


def test_an_owner_adds_a_saml_connection_and_its_page_says_what_to_register(owner_console, organization):
    response = post_form(owner_console, NEW, NEW, form())
    assert response.status_code == 302, response.content
    connection = SsoConnection.objects.get(organization=organization)
    assert (connection.protocol, connection.idp_certificate) == ("saml", BODY)
    page = owner_console.get(response["Location"]).content.decode()
    assert f"http://testserver/console/auth/sso/saml/{connection.id}/acs/" in page
    assert f"http://testserver/console/auth/sso/saml/{connection.id}/metadata/" in page
    fingerprint = x509.load_pem_x509_certificate(CERTIFICATE.encode()).fingerprint(hashes.SHA256())
    assert fingerprint.hex(":").upper() in page
    assert 'name="client_secret"' not in page  # an OIDC field is not on a SAML connection's form
    listed = owner_console.get("/console/sso/").content.decode()
    assert "SAML 2.0" in listed and "http://www.okta.com/exk1a2b3c4" in listed


def test_bad_saml_input_on_the_console_says_why_and_saves_nothing(owner_console):
    response = post_form(owner_console, NEW, NEW, form(idp_certificate="", idp_sso_url="ftp://x"))
    assert response.status_code == 400
    page = response.content.decode()
    assert "<code>idp_certificate</code>: This field may not be blank" in page
    assert "<code>idp_sso_url</code>: The single sign-on URL is an https URL" in page
    assert not SsoConnection.objects.exists()


def test_an_owner_edits_a_saml_connection_and_an_unreadable_certificate_is_flagged(
    owner_console, organization
):
    connection = make(organization)
    page = f"/console/sso/{connection.id}/"
    edit = f"/console/sso/{connection.id}/edit"
    response = post_form(owner_console, page, edit, form(name="Renamed", idp_certificate="AAAA"))
    assert response.status_code == 302, response.content
    connection.refresh_from_db()
    assert (connection.name, connection.idp_certificate) == ("Renamed", "AAAA")
    assert "not a readable X.509 certificate" in owner_console.get(page).content.decode()


@pytest.mark.parametrize("role", ["admin", "member"])
def test_admins_and_members_are_refused_the_saml_pages(console_for, organization, role):
    connection = make(organization)
    client = console_for(organization, role)
    assert client.get(f"/console/sso/{connection.id}/").status_code == 403
    token = client.cookies.get("csrftoken")
    token = token.value if token else ""
    response = client.post(
        f"/console/sso/{connection.id}/edit", {**form(name="x"), "csrfmiddlewaretoken": token}
    )
    assert response.status_code == 403
    assert SsoConnection.objects.get().name == "Okta SAML"


def test_another_organizations_saml_connection_answers_404(owner_console, outsider):
    theirs = make(outsider.organization, allowed_domains=["other.test"])
    assert owner_console.get(f"/console/sso/{theirs.id}/").status_code == 404
    response = post_form(owner_console, "/console/sso/", f"/console/sso/{theirs.id}/edit", form(name="x"))
    assert response.status_code == 404
    assert SsoConnection.objects.get(pk=theirs.pk).name == "Okta SAML"


def test_the_saml_forms_need_their_csrf_token(owner_console, organization):
    connection = make(organization)
    assert owner_console.post(NEW, form(allowed_domains="b.test")).status_code == 403
    assert owner_console.post(f"/console/sso/{connection.id}/edit", form(name="x")).status_code == 403
    assert SsoConnection.objects.count() == 1 and SsoConnection.objects.get().name == "Okta SAML"


def test_staff_add_and_edit_a_saml_connection_in_the_django_admin(organization):
    from django.test import Client

    from tests.factories import UserFactory
    from tests.management.admin_forms import form_errors

    staff = Client()
    staff.force_login(UserFactory(is_staff=True, is_superuser=True))
    values = {
        "organization": str(organization.pk),
        "name": "ADFS",
        "protocol": "saml",
        "idp_entity_id": "http://adfs.acme.test/adfs/services/trust",
        "idp_sso_url": "https://adfs/adfs/ls/",
        "idp_certificate": CERTIFICATE,
        "allowed_domains": "acme.test",
        "default_role": "member",
        "is_active": "on",
    }
    page = staff.post("/admin/sso/ssoconnection/add/", values)
    assert page.status_code == 302, form_errors(page)
    connection = SsoConnection.objects.get()
    assert (connection.protocol, connection.idp_sso_url, connection.idp_certificate) == (
        "saml",
        "https://adfs/adfs/ls/",
        BODY,
    )
    page = staff.post(f"/admin/sso/ssoconnection/{connection.pk}/change/", {**values, "name": "ADFS 2"})
    assert page.status_code == 302, form_errors(page)
    assert SsoConnection.objects.get().name == "ADFS 2"
