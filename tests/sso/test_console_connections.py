"""The console's SSO connections pages: owners only (reading included), tenancy, CSRF, the API's
checks and services (plan, domains), and the client secret write-only."""

import pytest

from apps.organizations.models import Organization
from apps.sso import services
from apps.sso.models import SsoConnection
from tests.console.conftest import csrf_token, post_form
from tests.factories import MembershipFactory
from tests.sso.conftest import new_secret
from tests.sso.flow import prove_domains

pytestmark = pytest.mark.django_db

LIST = "/console/sso/"
NEW = "/console/sso/new"


def make_connection(organization, **fields) -> SsoConnection:
    fields.setdefault("allowed_domains", ["acme.test"])
    return services.sso_connection_create(
        organization=organization,
        data=dict(
            name=fields.pop("name", "Okta"),
            issuer="https://login.acme.test/oauth2/default",
            client_id="0oa-client",
            client_secret=fields.pop("client_secret", new_secret()),
            **fields,
        ),
    )


def form(**fields) -> dict:
    data = {
        "name": "Okta",
        "issuer": "https://acme.okta.test/oauth2/default",
        "client_id": "0oa1b2c3",
        "client_secret": new_secret(),
        "allowed_domains": "acme.test, Acme.org",
        "default_role": "admin",
        "is_active": ["false", "true"],
        "require_sso": "false",
    }
    data.update(fields)
    return data


@pytest.fixture
def owner_console(console_for, organization):
    return console_for(organization, "owner")


def test_an_owner_adds_a_connection_and_its_secret_is_never_shown(owner_console, organization):
    body = form()
    response = post_form(owner_console, NEW, NEW, body)
    assert response.status_code == 302
    connection = SsoConnection.objects.get(organization=organization)
    assert response["Location"] == f"/console/sso/{connection.id}/"
    assert connection.allowed_domains == ["acme.org", "acme.test"]
    assert (connection.default_role, connection.is_active, connection.require_sso) == ("admin", True, False)
    assert connection.client_secret() == body["client_secret"]
    page = owner_console.get(response["Location"]).content.decode()
    assert body["client_secret"] not in page
    assert f"…{body['client_secret'][-4:]}" in page
    assert f"http://testserver/console/auth/sso/{connection.id}/callback/" in page
    listing = owner_console.get(LIST).content.decode()
    assert "Okta" in listing and body["client_secret"] not in listing


def test_bad_input_says_why_and_saves_nothing_nor_echoes_the_secret(owner_console, organization):
    body = form(issuer="http://insecure.test", allowed_domains="localhost", client_secret="Zq7#xY!")
    response = post_form(owner_console, NEW, NEW, body)
    assert response.status_code == 400
    page = response.content.decode()
    assert "issuer" in page and "allowed_domains" in page and "client_secret" in page
    assert "is not a domain name" in page
    assert "Zq7#xY!" not in page and "Zq7#xY!" not in page.replace("&#x27;", "'")
    assert not SsoConnection.objects.exists()
    response = post_form(owner_console, NEW, NEW, form(client_secret=""))
    assert response.status_code == 400 and not SsoConnection.objects.exists()


def test_the_free_plan_is_a_clear_refusal(owner_console, organization):
    Organization.objects.filter(pk=organization.pk).update(plan="free")
    assert "free plan" in owner_console.get(LIST).content.decode()
    body = form()
    response = post_form(owner_console, NEW, NEW, body)
    assert response.status_code == 403
    page = response.content.decode()
    assert "Single sign-on needs the growth or enterprise plan." in page
    assert body["client_secret"] not in page
    assert not SsoConnection.objects.exists()


def test_a_domain_of_another_organization_is_a_conflict(owner_console, outsider):
    prove_domains(make_connection(outsider.organization, allowed_domains=["acme.test"]))
    response = post_form(owner_console, NEW, NEW, form(allowed_domains="acme.test"))
    assert response.status_code == 409
    assert "proved by another organization: acme.test" in response.content.decode()
    assert SsoConnection.objects.count() == 1


def test_an_owner_edits_a_connection_keeping_or_replacing_the_secret(owner_console, organization):
    connection = make_connection(organization)
    secret = connection.client_secret()
    page = f"/console/sso/{connection.id}/"
    edit = f"/console/sso/{connection.id}/edit"
    body = form(
        name="Okta EU",
        client_secret="",
        allowed_domains="acme.test eu.acme.test",
        require_sso=["false", "true"],
    )
    response = post_form(owner_console, page, edit, body)
    assert response.status_code == 302
    connection.refresh_from_db()
    assert (connection.name, connection.require_sso) == ("Okta EU", True)
    assert connection.allowed_domains == ["acme.test", "eu.acme.test"]
    assert connection.client_secret() == secret  # left empty: kept
    replacement = new_secret()
    assert post_form(owner_console, page, edit, form(client_secret=replacement)).status_code == 302
    connection.refresh_from_db()
    assert connection.client_secret() == replacement
    response = post_form(owner_console, page, edit, form(issuer="ftp://nope", client_secret=new_secret()))
    assert response.status_code == 400 and "issuer" in response.content.decode()
    connection.refresh_from_db()
    assert connection.client_secret() == replacement and connection.issuer.startswith("https://")
    assert secret not in owner_console.get(page).content.decode()


def test_an_owner_deletes_a_connection(owner_console, organization):
    connection = make_connection(organization)
    response = post_form(owner_console, LIST, f"/console/sso/{connection.id}/delete", {})
    assert response.status_code == 302 and response["Location"] == LIST
    assert not SsoConnection.objects.exists()


@pytest.mark.parametrize("role", ["admin", "member"])
def test_admins_and_members_are_refused_every_page_and_action(console_for, organization, role):
    connection = make_connection(organization)
    client = console_for(organization, role)
    for path in (LIST, NEW, f"/console/sso/{connection.id}/"):
        assert client.get(path).status_code == 403
    token = csrf_token(client, "/console/account/")
    for path, data in (
        (NEW, form()),
        (f"/console/sso/{connection.id}/edit", form(name="Taken over")),
        (f"/console/sso/{connection.id}/delete", {}),
    ):
        assert client.post(path, {**data, "csrfmiddlewaretoken": token}).status_code == 403
    connection.refresh_from_db()
    assert connection.name == "Okta" and SsoConnection.objects.count() == 1


def test_another_organizations_connection_answers_404(owner_console, outsider):
    theirs = make_connection(outsider.organization, allowed_domains=["their.test"])
    assert owner_console.get(f"/console/sso/{theirs.id}/").status_code == 404
    token = csrf_token(owner_console, LIST)
    for action in ("edit", "delete"):
        response = owner_console.post(
            f"/console/sso/{theirs.id}/{action}", {**form(name="Mine now"), "csrfmiddlewaretoken": token}
        )
        assert response.status_code == 404
    theirs.refresh_from_db()
    assert theirs.name == "Okta"
    assert "their.test" not in owner_console.get(LIST).content.decode()


def test_every_form_needs_its_csrf_token(owner_console, organization):
    connection = make_connection(organization)
    for path, data in (
        (NEW, form()),
        (f"/console/sso/{connection.id}/edit", form(name="x")),
        (f"/console/sso/{connection.id}/delete", {}),
    ):
        assert owner_console.post(path, data).status_code == 403
    assert SsoConnection.objects.count() == 1 and SsoConnection.objects.get().name == "Okta"


def test_a_visitor_is_sent_to_sign_in(client):
    response = client.get(LIST)
    assert response.status_code == 302 and response["Location"].startswith("/console/login/")


def test_an_owner_of_two_organizations_sees_only_the_one_they_work_in(owner_console, organization, outsider):
    MembershipFactory(organization=outsider.organization, user=owner_console.membership.user, role="owner")
    make_connection(outsider.organization, name="Theirs", allowed_domains=["their.test"])
    assert "Theirs" not in owner_console.get(LIST).content.decode()
