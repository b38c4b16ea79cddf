import pytest

from apps.organizations.models import Plan
from apps.sso.models import SsoConnection
from tests.conftest import login
from tests.factories import MembershipFactory
from tests.sso.conftest import CONNECTIONS, connection_body, create_connection, new_secret
from tests.sso.flow import prove_domains

pytestmark = pytest.mark.django_db


def client_of(api_client, membership):
    tokens = login(api_client, membership.user.email)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens['access']}")
    return api_client


@pytest.fixture
def outsider_client(outsider):
    from rest_framework.test import APIClient

    return client_of(APIClient(), outsider)


def test_an_owner_creates_lists_reads_changes_and_deletes_a_connection(session_client):
    body = connection_body(
        allowed_domains=["Example.COM", "example.org", "example.com"], default_role="admin"
    )
    response = session_client.post(CONNECTIONS, body, format="json")
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["protocol"] == "oidc"
    assert created["allowed_domains"] == ["example.com", "example.org"]
    assert created["default_role"] == "admin"
    assert created["is_active"] is True and created["require_sso"] is False
    assert created["client_secret_hint"] == "…" + body["client_secret"][-4:]
    assert "client_secret" not in created

    listed = session_client.get(CONNECTIONS).json()
    assert [item["id"] for item in listed["results"]] == [created["id"]]
    assert session_client.get(f"{CONNECTIONS}/{created['id']}").json() == created

    response = session_client.patch(
        f"{CONNECTIONS}/{created['id']}", {"name": "Okta EU", "require_sso": True}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "Okta EU" and response.json()["require_sso"] is True

    assert session_client.delete(f"{CONNECTIONS}/{created['id']}").status_code == 204
    assert session_client.get(f"{CONNECTIONS}/{created['id']}").status_code == 404


def test_the_secret_is_stored_encrypted_and_replaced_only_when_given(session_client):
    first = new_secret()
    created = create_connection(session_client, client_secret=first)
    connection = SsoConnection.objects.get(pk=created["id"])
    assert first not in connection.client_secret_encrypted
    assert connection.client_secret() == first

    session_client.patch(f"{CONNECTIONS}/{created['id']}", {"name": "renamed"}, format="json")
    connection.refresh_from_db()
    assert connection.client_secret() == first

    second = new_secret()
    response = session_client.patch(
        f"{CONNECTIONS}/{created['id']}", {"client_secret": second}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["client_secret_hint"] == "…" + second[-4:]
    connection.refresh_from_db()
    assert connection.client_secret() == second


def test_the_secret_is_in_no_response(session_client):
    secret = new_secret()
    created = create_connection(session_client, client_secret=secret)
    url = f"{CONNECTIONS}/{created['id']}"
    responses = [
        session_client.get(CONNECTIONS),
        session_client.get(url),
        session_client.patch(url, {"client_secret": secret, "issuer": "http://x"}, format="json"),
        session_client.patch(
            url, {"client_secret": secret, "allowed_domains": ["bad domain"]}, format="json"
        ),
        session_client.patch(url, {"client_secret": secret}, format="json"),
        session_client.post(CONNECTIONS, connection_body(client_secret=secret), format="json"),  # 409
    ]
    assert [r.status_code for r in responses] == [200, 200, 400, 400, 200, 409]
    for response in responses:
        assert secret not in response.content.decode()
        assert secret[4:-4] not in response.content.decode()


@pytest.mark.parametrize("role", ["member", "admin"])
def test_members_and_admins_are_refused_every_method(client_for, session_client, organization, role):
    created = create_connection(session_client)
    client = client_for(organization, role)
    url = f"{CONNECTIONS}/{created['id']}"
    answers = [
        client.get(CONNECTIONS),
        client.get(url),
        client.post(CONNECTIONS, connection_body(allowed_domains=["other.example"]), format="json"),
        client.patch(url, {"name": "mine now"}, format="json"),
        client.delete(url),
    ]
    assert [answer.status_code for answer in answers] == [403] * 5
    assert {answer.json()["error"]["code"] for answer in answers} == {"permission_denied"}
    assert SsoConnection.objects.get(pk=created["id"]).name == "Okta"
    assert SsoConnection.objects.count() == 1


def test_the_free_plan_cannot_create_a_connection(session_client, organization):
    organization.plan = Plan.FREE
    organization.save()
    response = session_client.post(CONNECTIONS, connection_body(), format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "plan_required"
    response = session_client.post(CONNECTIONS, connection_body(is_active=False), format="json")
    assert response.json()["error"]["code"] == "plan_required"
    assert not SsoConnection.objects.exists()


def test_the_free_plan_cannot_activate_a_connection(session_client, organization):
    created = create_connection(session_client, is_active=False)
    organization.plan = Plan.FREE
    organization.save()
    url = f"{CONNECTIONS}/{created['id']}"
    response = session_client.patch(url, {"is_active": True}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "plan_required"
    assert SsoConnection.objects.get(pk=created["id"]).is_active is False
    # Other changes still work, and so does deleting.
    assert session_client.patch(url, {"name": "kept"}, format="json").status_code == 200
    assert session_client.delete(url).status_code == 204


def test_a_domain_another_organization_proved_is_409(session_client, outsider_client):
    theirs = create_connection(outsider_client, allowed_domains=["example.com"])
    prove_domains(SsoConnection.objects.get(pk=theirs["id"]))
    response = session_client.post(
        CONNECTIONS, connection_body(allowed_domains=["EXAMPLE.com"]), format="json"
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "sso_domain_taken"
    assert "Okta" not in error["message"]  # the other organization's connection is not named

    # Inactive, it claims nothing; activating it then finds the domain taken.
    created = create_connection(session_client, allowed_domains=["example.com"], is_active=False)
    url = f"{CONNECTIONS}/{created['id']}"
    assert session_client.patch(url, {"is_active": True}, format="json").status_code == 409
    assert SsoConnection.objects.get(pk=created["id"]).is_active is False
    # Adding a taken domain to an active connection is refused as well.
    other = create_connection(session_client, allowed_domains=["example.net"])
    response = session_client.patch(
        f"{CONNECTIONS}/{other['id']}", {"allowed_domains": ["example.net", "example.com"]}, format="json"
    )
    assert response.status_code == 409
    assert session_client.get(f"{CONNECTIONS}/{other['id']}").json()["allowed_domains"] == ["example.net"]


def test_an_unproved_claim_of_another_organization_blocks_nobody(session_client, outsider_client):
    """A claim alone proves nothing, so it cannot squat a domain against the organization that owns it."""
    create_connection(outsider_client, allowed_domains=["example.com"], require_sso=True)
    assert session_client.post(CONNECTIONS, connection_body(), format="json").status_code == 201


def test_within_an_organization_a_domain_has_one_active_connection(session_client):
    mine = create_connection(session_client, allowed_domains=["example.com"])
    response = session_client.post(CONNECTIONS, connection_body(), format="json")
    assert response.status_code == 409 and response.json()["error"]["code"] == "sso_domain_taken"
    session_client.patch(f"{CONNECTIONS}/{mine['id']}", {"is_active": False}, format="json")
    second = create_connection(session_client, allowed_domains=["example.com"])
    activate = {"is_active": True}
    assert session_client.patch(f"{CONNECTIONS}/{mine['id']}", activate, format="json").status_code == 409
    assert session_client.delete(f"{CONNECTIONS}/{second['id']}").status_code == 204
    assert session_client.patch(f"{CONNECTIONS}/{mine['id']}", activate, format="json").status_code == 200


def test_a_proof_is_released_with_the_last_connection_that_names_the_domain(session_client, outsider_client):
    theirs = create_connection(outsider_client, allowed_domains=["example.com"])
    prove_domains(SsoConnection.objects.get(pk=theirs["id"]))
    assert session_client.post(CONNECTIONS, connection_body(), format="json").status_code == 409
    assert outsider_client.delete(f"{CONNECTIONS}/{theirs['id']}").status_code == 204
    assert session_client.post(CONNECTIONS, connection_body(), format="json").status_code == 201


@pytest.mark.parametrize(
    "issuer",
    [
        "http://login.example.com",
        "login.example.com",
        "not a url",
        "https://",
        "https://login.example.com/?tenant=1",
        "https://login.example.com/#x",
        "https://user:pw@login.example.com",
        " https://login.example.com",
        "https://login.example.com/ä",
        "https://login.example.com:99999",
        "https://login.example.com/a b",
        "",
        42,
    ],
)
def test_an_issuer_that_is_no_https_url_is_400(session_client, issuer):
    response = session_client.post(CONNECTIONS, connection_body(issuer=issuer), format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == ["issuer"]


@pytest.mark.parametrize(
    "issuer",
    ["https://login.example.com/", "https://127.0.0.1:8443/realms/acme", "https://Login.Example.com/v2.0"],
)
def test_an_https_issuer_is_kept_exactly(session_client, issuer):
    assert create_connection(session_client, issuer=issuer)["issuer"] == issuer


@pytest.mark.parametrize(
    "domains",
    [
        [],
        ["not a domain"],
        ["localhost"],
        ["example..com"],
        ["-example.com"],
        ["user@example.com"],
        ["10.0.0.1"],
        ["exämple.com"],
        ["example.com", 7],
        "example.com",
        [f"d{n}.example.com" for n in range(51)],
    ],
)
def test_bad_domains_are_400(session_client, domains):
    response = session_client.post(CONNECTIONS, connection_body(allowed_domains=domains), format="json")
    assert response.status_code == 400, response.content
    fields = list(response.json()["error"]["fields"])
    assert len(fields) == 1 and fields[0].startswith("allowed_domains"), fields


@pytest.mark.parametrize(
    "fields",
    [
        {"default_role": "owner"},
        {"protocol": "saml"},
        {"client_secret": "short"},
        {"is_active": "yes"},
        {"unknown": 1},
        {"is_active": False, "require_sso": True},
    ],
)
def test_other_bad_input_is_400(session_client, fields):
    response = session_client.post(CONNECTIONS, connection_body(**fields), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"
    assert not SsoConnection.objects.exists()


def test_an_unknown_field_in_a_change_is_400(session_client):
    created = create_connection(session_client)
    response = session_client.patch(f"{CONNECTIONS}/{created['id']}", {"nmae": "typo"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"nmae": ["Unknown field."]}


def test_another_organizations_connection_is_404(session_client, outsider_client):
    theirs = create_connection(outsider_client, allowed_domains=["outsider.example"])
    url = f"{CONNECTIONS}/{theirs['id']}"
    assert session_client.get(url).status_code == 404
    assert session_client.patch(url, {"name": "taken"}, format="json").status_code == 404
    assert session_client.delete(url).status_code == 404
    assert session_client.get(CONNECTIONS).json()["results"] == []
    assert SsoConnection.objects.get(pk=theirs["id"]).name == "Okta"


def test_an_owner_of_another_organization_sees_only_their_own(api_client, session_client):
    create_connection(session_client)
    stranger = MembershipFactory(role="owner")
    client = client_of(api_client, stranger)
    assert client.get(CONNECTIONS).json()["results"] == []
