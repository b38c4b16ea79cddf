"""Issue 19, finding 2: one organization's SSO domain claim must not lock another organization's people
out. Replays the proved attack through the public interface (the API, the console, the Django admin):
organization B's owner invites A's owner, claims A's email domain with ``require_sso``; and checks the
three guards: consent (an invitation A's owner accepts), ``require_sso`` scoped to B's own sessions,
and a domain that routes or refuses nothing until B proves it (DNS TXT record, or an operator)."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.organizations.models import Membership
from tests.console.conftest import csrf_token, post_form
from tests.dns_server import LoopbackDnsServer
from tests.factories import PASSWORD, MembershipFactory, UserFactory
from tests.sso.conftest import CONNECTIONS, connection_body
from tests.sso.flow import INITIATE, browser, password_sign_in

pytestmark = pytest.mark.django_db

LOGIN = "/api/v1/auth/login"
DOMAINS = "/api/v1/sso/domains"


def api_session(email: str, **body) -> APIClient:
    client = APIClient()
    tokens = login_as(client, email, **body)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    return client


def login_as(client: APIClient, email: str, **body):
    response = client.post(LOGIN, {"email": email, "password": PASSWORD, **body}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def a_owner():
    """Organization A's owner, who is also the gateway's first superuser, at example.com."""
    user = UserFactory(email="ceo@example.com", is_staff=True, is_superuser=True)
    membership = MembershipFactory(
        user=user, role="owner", organization__name="Org A", organization__plan="growth"
    )
    MembershipFactory(organization=membership.organization, role="member", user__email="dev@example.com")
    return membership


@pytest.fixture
def b_owner():
    return MembershipFactory(
        role="owner",
        user__email="mallory@b.test",
        organization__name="Org B",
        organization__plan="enterprise",
    )


@pytest.fixture
def b_api(b_owner) -> APIClient:
    return api_session(b_owner.user.email)


def b_claims_example_com(b_api: APIClient, provider=None) -> dict:
    """B's connection claiming example.com; to the loopback identity provider when routing is checked
    (initiating reads its discovery document), never to a public name."""
    issuer = {"issuer": provider.issuer, "client_id": provider.client_id} if provider else {}
    response = b_api.post(
        CONNECTIONS,
        connection_body(allowed_domains=["example.com"], require_sso=True, **issuer),
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def assert_signs_in_to_a_with_a_password(a_owner) -> None:
    """The API's login lands in A, and the console opens in A."""
    client = APIClient()
    tokens = login_as(client, a_owner.user.email)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    assert client.get("/api/v1/organizations/current").json()["name"] == "Org A"
    tokens = login_as(APIClient(), a_owner.user.email, organization_id=str(a_owner.organization_id))
    assert tokens["access"]
    console = browser()
    assert password_sign_in(console, a_owner.user.email, PASSWORD)["Location"] == "/console/"
    page = console.get("/console/organization/settings/")
    assert page.status_code == 200 and "Org A" in page.content.decode()


def test_an_owner_who_is_invited_elsewhere_joins_nothing_until_they_accept(a_owner, b_owner, b_api):
    response = b_api.post(
        "/api/v1/organizations/current/invitations",
        {"email": "CEO@example.com", "role": "member"},
        format="json",
    )
    assert response.status_code == 201
    assert not Membership.objects.filter(organization=b_owner.organization, user=a_owner.user).exists()
    # The console's old way in (an owner adding an existing account outright) is gone.
    console = Client(enforce_csrf_checks=True)
    console.force_login(b_owner.user)
    response = post_form(
        console,
        "/console/organization/members/",
        "/console/organization/members/add",
        {"email": "ceo@example.com"},
    )
    assert response.status_code == 404
    assert not Membership.objects.filter(organization=b_owner.organization, user=a_owner.user).exists()


def test_an_unproved_claim_neither_routes_sign_in_nor_refuses_a_password(a_owner, b_owner, b_api):
    # Even with A's owner (and a member of A) in B, B's unproved claim of example.com does nothing.
    MembershipFactory(organization=b_owner.organization, user=a_owner.user, role="member")
    MembershipFactory(
        organization=b_owner.organization, user=Membership.objects.get(user__email="dev@example.com").user
    )
    b_claims_example_com(b_api)

    assert_signs_in_to_a_with_a_password(a_owner)
    login_as(APIClient(), "dev@example.com")
    # "Sign in with SSO" does not go to B's identity provider, through the API or the console.
    response = APIClient().post(INITIATE, {"email": "ceo@example.com"}, format="json")
    assert response.status_code == 404 and response.json()["error"]["code"] == "sso_connection_not_found"
    console = browser()
    response = console.post(
        "/console/login/sso/",
        {"email": "dev@example.com", "csrfmiddlewaretoken": csrf_token(console, "/console/login/")},
    )
    assert response.status_code == 404
    # B's own owner sees the domain as not proved, with the record that would prove it.
    listed = b_api.get(DOMAINS).json()["results"]
    assert [(d["domain"], d["verified"]) for d in listed] == [("example.com", False)]
    assert listed[0]["txt_record"]["name"] == "_gateway-challenge.example.com"


def test_a_proved_require_sso_refuses_passwords_only_in_its_own_organization(
    a_owner, b_owner, b_api, oidc_provider
):
    """B proves example.com (an operator approves it) and requires SSO: A's owner, who accepted B's
    invitation, still signs in to A with a password, and never into B with it."""
    invitation = b_api.post(
        "/api/v1/organizations/current/invitations", {"email": a_owner.user.email}, format="json"
    ).json()
    a_api = api_session(a_owner.user.email)
    assert [i["id"] for i in a_api.get("/api/v1/invitations").json()] == [invitation["id"]]
    assert a_api.post(f"/api/v1/invitations/{invitation['id']}/accept").status_code == 200
    connection = b_claims_example_com(b_api, oidc_provider)
    from apps.sso.models import SsoDomain

    approve_in_the_admin(SsoDomain.objects.get(organization=b_owner.organization, domain="example.com"))

    # Proved: B's identity provider signs in example.com addresses now.
    response = APIClient().post(INITIATE, {"email": "dev@example.com"}, format="json")
    assert response.status_code == 200 and connection["id"] in response.json()["authorization_url"]

    assert_signs_in_to_a_with_a_password(a_owner)
    refused = APIClient().post(
        LOGIN,
        {"email": a_owner.user.email, "password": PASSWORD, "organization_id": str(b_owner.organization_id)},
        format="json",
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "sso_required"
    # The console's password session stays out of B: not offered, and a forged switch is refused.
    console = browser()
    password_sign_in(console, a_owner.user.email, PASSWORD)
    page = console.get("/console/organization/settings/").content.decode()
    assert "Org B" not in page
    console.post(
        "/console/organization/",
        {
            "organization_id": str(b_owner.organization_id),
            "csrfmiddlewaretoken": console.cookies["csrftoken"].value,
        },
    )
    assert "Org A" in console.get("/console/organization/settings/").content.decode()


def approve_in_the_admin(sso_domain) -> None:
    staff = Client()
    staff.force_login(UserFactory(is_staff=True, is_superuser=True))
    response = staff.post(
        "/admin/sso/ssodomain/",
        {"action": "approve", "_selected_action": [str(sso_domain.id)], "index": 0},
        follow=True,
    )
    assert response.status_code == 200
    sso_domain.refresh_from_db()
    assert sso_domain.verified_by == "operator"


# --- Proving by DNS ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _dns_server():
    server = LoopbackDnsServer().start()
    yield server
    server.stop()


@pytest.fixture
def dns_server(_dns_server, settings):
    _dns_server.records.clear()
    _dns_server.silent = False
    settings.GATEWAY_SSO_DNS_RESOLVERS = [_dns_server.address]
    settings.GATEWAY_SSO_DNS_TIMEOUT_SECONDS = 0.5
    return _dns_server


def test_an_owner_proves_a_domain_with_its_txt_record(dns_server, b_owner, b_api):
    b_claims_example_com(b_api)
    domain = b_api.get(DOMAINS).json()["results"][0]
    record = domain["txt_record"]
    verify = f"{DOMAINS}/{domain['id']}/verify"

    response = b_api.post(verify)  # nothing published yet
    assert response.status_code == 400 and response.json()["error"]["code"] == "sso_domain_not_proved"
    dns_server.records[record["name"]] = ["gateway-verify=someone-elses-token"]
    assert b_api.post(verify).status_code == 400
    dns_server.records[record["name"]] = ["v=spf1 -all", record["value"]]
    response = b_api.post(verify)
    assert response.status_code == 200 and response.json()["verified"] is True
    assert response.json()["verified_by"] == "dns"
    assert dns_server.queries[-1] == record["name"]


def test_a_resolver_that_does_not_answer_is_503_not_a_refusal(dns_server, b_api):
    b_claims_example_com(b_api)
    dns_server.silent = True
    domain = b_api.get(DOMAINS).json()["results"][0]
    response = b_api.post(f"{DOMAINS}/{domain['id']}/verify")
    assert response.status_code == 503 and response.json()["error"]["code"] == "sso_dns_unavailable"


def test_one_organization_at_most_proves_a_domain(dns_server, b_owner, b_api, a_owner):
    b_claims_example_com(b_api)
    a_api = api_session(a_owner.user.email)
    response = a_api.post(CONNECTIONS, connection_body(allowed_domains=["example.com"]), format="json")
    assert response.status_code == 201  # B's unproved claim squats nothing
    a_domain = a_api.get(DOMAINS).json()["results"][0]
    b_domain = b_api.get(DOMAINS).json()["results"][0]
    assert a_domain["txt_record"]["value"] != b_domain["txt_record"]["value"]
    dns_server.records[a_domain["txt_record"]["name"]] = [
        a_domain["txt_record"]["value"],
        b_domain["txt_record"]["value"],
    ]
    assert a_api.post(f"{DOMAINS}/{a_domain['id']}/verify").status_code == 200
    response = b_api.post(f"{DOMAINS}/{b_domain['id']}/verify")
    assert response.status_code == 409 and response.json()["error"]["code"] == "sso_domain_taken"
    assert b_api.get(f"{DOMAINS}/{b_domain['id']}").json()["verified"] is False
    # Another organization's domain is not found, and members cannot read domains.
    assert a_api.get(f"{DOMAINS}/{b_domain['id']}").status_code == 404
    member = MembershipFactory(organization=b_owner.organization, role="admin")
    assert api_session(member.user.email).get(DOMAINS).status_code == 403
