import pytest
from django.test import Client

from apps.organizations.models import Plan
from apps.sso import services
from apps.sso.models import SsoConnection
from tests.factories import UserFactory
from tests.management.admin_forms import admin_post, form_errors
from tests.sso.conftest import new_secret
from tests.sso.flow import prove_domains

pytestmark = pytest.mark.django_db
ADD = "/admin/sso/ssoconnection/add/"


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def admin_form(organization, **overrides) -> dict:
    values = {
        "organization": str(organization.pk),
        "name": "Entra ID",
        "protocol": "oidc",
        "issuer": "https://login.example.com/tenant/v2.0",
        "client_id": "client-1",
        "client_secret": new_secret(),
        "allowed_domains": "Example.com, example.org",
        "default_role": "member",
        "is_active": "on",
    }
    values.update(overrides)
    return values


def change_url(connection) -> str:
    return f"/admin/sso/ssoconnection/{connection.pk}/change/"


def test_the_admin_console_creates_a_connection_through_the_service(admin_browser, organization):
    values = admin_form(organization)
    page = admin_browser.post(ADD, values)
    assert page.status_code == 302, form_errors(page)
    connection = SsoConnection.objects.get()
    assert connection.client_secret() == values["client_secret"]
    assert connection.allowed_domains == ["example.com", "example.org"]
    assert sorted(connection.domain_claims.values_list("domain", flat=True)) == ["example.com", "example.org"]
    change_page = admin_browser.get(change_url(connection)).content.decode()
    assert values["client_secret"] not in change_page
    assert "…" + values["client_secret"][-4:] in change_page


def test_the_admin_console_keeps_the_secret_unless_a_new_one_is_given(admin_browser, organization):
    secret = new_secret()
    connection = services.sso_connection_create(
        organization=organization,
        data=dict(
            name="Okta",
            issuer="https://login.example.com",
            client_id="client-1",
            client_secret=secret,
            allowed_domains=["example.com"],
        ),
    )
    page = admin_post(admin_browser, change_url(connection), name="Renamed")
    assert page.status_code == 302, form_errors(page)
    connection.refresh_from_db()
    assert connection.name == "Renamed" and connection.client_secret() == secret
    replacement = new_secret()
    admin_post(admin_browser, change_url(connection), client_secret=replacement)
    connection.refresh_from_db()
    assert connection.client_secret() == replacement


def test_the_admin_console_refuses_the_free_plan_with_a_message(admin_browser, organization):
    organization.plan = Plan.FREE
    organization.save()
    page = admin_browser.post(ADD, admin_form(organization), follow=True)
    assert "growth or enterprise" in page.content.decode()
    assert not SsoConnection.objects.exists()


@pytest.mark.parametrize(
    "field, value",
    [("issuer", "http://login.example.com"), ("allowed_domains", "not a domain"), ("default_role", "owner")],
)
def test_the_admin_console_refuses_what_the_api_refuses(admin_browser, organization, field, value):
    page = admin_browser.post(ADD, admin_form(organization, **{field: value}))
    assert page.status_code == 200
    assert field in form_errors(page)
    assert not SsoConnection.objects.exists()


def test_the_service_refuses_a_domain_another_organization_proved(organization, outsider):
    fields = {
        "name": "Okta",
        "issuer": "https://login.example.com",
        "client_id": "client-1",
        "allowed_domains": ["example.com"],
    }
    theirs = services.sso_connection_create(
        organization=outsider.organization, data={**fields, "client_secret": new_secret()}
    )
    prove_domains(theirs)
    with pytest.raises(services.DomainTaken):
        services.sso_connection_create(
            organization=organization, data={**fields, "client_secret": new_secret()}
        )
