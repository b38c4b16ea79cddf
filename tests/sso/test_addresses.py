"""Single sign-on never makes the gateway call an address it must not (docs/sso.md, "Addresses";
issue 19, finding 4): the issuer when a connection is saved, every URL of the discovery document when
it is read, and every address a connection resolves to, pinned for the connection. The refusals are
proved with loopback listeners that record whether anything reached them."""

import socket
import threading

import pytest
from django.core.cache import cache

from apps.sso.models import SsoConnection
from tests.conftest import login
from tests.factories import MembershipFactory, OrganizationFactory
from tests.sso.conftest import CONNECTIONS, connection_body, create_connection
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
)

pytestmark = pytest.mark.django_db

METADATA_PATH = "/latest/meta-data/iam/security-credentials/"


class Listener:
    """A loopback TCP port that accepts every connection, records it with what was sent on it, and
    hangs up without answering: whatever reaches it is in ``received``."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed
                return
            self.received.append(b"")
            with connection:
                connection.settimeout(1)
                try:
                    while chunk := connection.recv(65536):
                        self.received[-1] += chunk
                except OSError:  # nothing more within the second, or reset
                    pass

    def close(self) -> None:
        self._socket.close()


@pytest.fixture
def listener():
    listening = Listener()
    yield listening
    listening.close()


@pytest.fixture
def outsider_client(outsider):
    """The owner of another organization, signed in."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(client, outsider.user.email)['access']}")
    return client


@pytest.fixture
def private_off(settings):
    settings.GATEWAY_ALLOW_PRIVATE_SSO = False


@pytest.fixture
def acme(oidc_provider):
    organization = OrganizationFactory(name="Acme", slug="acme", plan="growth")
    MembershipFactory(organization=organization, role="owner")
    return connect(organization, oidc_provider)


@pytest.fixture
def dns(monkeypatch):
    """Answers for ``localhost``, as a resolver would give them (a list of addresses, in order);
    other names resolve as usual. Counts the look-ups of that name."""
    real = socket.getaddrinfo
    answers = {"localhost": ["127.0.0.1"]}
    lookups = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host in answers:
            lookups.append(host)
            return [info for address in answers[host] for info in real(address, port, *args, **kwargs)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


def refused_at_initiate(api_client) -> dict:
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert response.status_code == 503, response.content
    error = response.json()["error"]
    assert error["code"] == "sso_address_refused"
    return error


# --- When a connection is saved -------------------------------------------------------------------


@pytest.mark.parametrize(
    "issuer",
    [
        "https://127.0.0.1:8443",
        "https://10.1.2.3/realms/acme",
        "https://192.168.0.10",
        "https://2130706433",  # 127.0.0.1, as the resolver reads a number
        "https://0x7f.0.0.1",
        "https://127.1:8443",
        "https://localhost:8443",
        "https://idp.localhost",
    ],
)
def test_an_issuer_at_a_private_or_loopback_address_is_refused_with_the_setting_off(
    session_client, outsider_client, private_off, issuer
):
    response = session_client.post(CONNECTIONS, connection_body(issuer=issuer), format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "sso_address_refused"
    assert "GATEWAY_ALLOW_PRIVATE_SSO=true" in error["fields"]["issuer"][0]
    assert not SsoConnection.objects.exists()
    assert outsider_client.get(CONNECTIONS).json()["results"] == []


@pytest.mark.parametrize(
    "issuer",
    ["https://169.254.169.254/latest", "https://2852039166", "https://100.100.100.200"],
)
def test_an_issuer_at_a_metadata_address_is_refused_even_with_the_setting_on(session_client, issuer):
    response = session_client.post(CONNECTIONS, connection_body(issuer=issuer), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "sso_address_refused"
    assert "never allowed" in response.json()["error"]["fields"]["issuer"][0]


def test_changing_the_issuer_to_a_loopback_address_is_refused(session_client, outsider_client, private_off):
    created = create_connection(session_client)
    response = session_client.patch(
        f"{CONNECTIONS}/{created['id']}", {"issuer": "https://127.0.0.1:9443"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "sso_address_refused"
    assert SsoConnection.objects.get(pk=created["id"]).issuer == created["issuer"]
    assert outsider_client.get(f"{CONNECTIONS}/{created['id']}").status_code == 404


def test_the_console_and_the_django_admin_refuse_it_through_the_same_service(
    console_for, organization, private_off
):
    from django.test import Client

    from tests.console.conftest import post_form
    from tests.factories import UserFactory
    from tests.sso.test_admin import ADD, admin_form
    from tests.sso.test_console_connections import NEW, form

    response = post_form(console_for(organization, "owner"), NEW, NEW, form(issuer="https://127.0.0.1:8443"))
    assert response.status_code == 400
    assert "GATEWAY_ALLOW_PRIVATE_SSO=true" in response.content.decode()

    staff = Client()
    staff.force_login(UserFactory(is_staff=True, is_superuser=True))
    response = staff.post(ADD, admin_form(organization, issuer="https://localhost:8443"), follow=True)
    assert "GATEWAY_ALLOW_PRIVATE_SSO=true" in response.content.decode()
    assert not SsoConnection.objects.exists()


def test_an_issuers_name_is_not_looked_up_when_saved(session_client, private_off, monkeypatch):
    """The address is checked when the gateway connects; a name looked up at saving proves nothing then."""
    looked_up = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: looked_up.append(host) or [])
    create_connection(session_client, issuer="https://login.example.com/oauth2/default")
    assert looked_up == []


# --- When a sign-in starts --------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_initiate_contacts_nothing_when_the_issuer_is_loopback_and_the_setting_off(
    api_client, acme, listener, settings, host
):
    """A connection saved while the setting was on: turning it off stops every connection to it."""
    SsoConnection.objects.filter(pk=acme.pk).update(issuer=f"https://{host}:{listener.port}")
    settings.GATEWAY_ALLOW_PRIVATE_SSO = False
    response = api_client.post(INITIATE, {"email": "alice@acme.test"}, format="json")
    assert listener.received == []
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "sso_address_refused"
    assert "127.0.0.1" not in error["message"] and "localhost" not in error["message"]


@pytest.mark.parametrize(
    ("endpoint", "url"),
    [
        ("token_endpoint", "http://127.0.0.1:{port}" + METADATA_PATH),
        ("token_endpoint", "https://169.254.169.254" + METADATA_PATH),
        ("token_endpoint", "http://169.254.169.254" + METADATA_PATH),
        ("token_endpoint", "https://user:password@127.0.0.1:{port}/token"),
        ("jwks_uri", "https://[fe80::1]/jwks"),
        ("jwks_uri", "https://[::ffff:169.254.169.254]/jwks"),
        ("jwks_uri", "file:///etc/passwd"),
        ("userinfo_endpoint", "https://100.100.100.200/userinfo"),
        ("userinfo_endpoint", "http://127.0.0.1:{port}/userinfo"),
        ("authorization_endpoint", "http://idp.example.test/authorize"),
        ("authorization_endpoint", "https://169.254.169.254/authorize"),
        ("end_session_endpoint", "javascript:alert(1)"),
    ],
)
def test_a_discovery_document_naming_a_refused_url_is_refused_at_initiate(
    api_client, acme, oidc_provider, listener, endpoint, url
):
    oidc_provider.discovery_overrides = {endpoint: url.format(port=listener.port)}
    error = refused_at_initiate(api_client)
    assert oidc_provider.client_secret not in error["message"]
    assert listener.received == []
    assert oidc_provider.authorization_requests == []


def test_an_http_authorization_endpoint_on_loopback_is_allowed_with_the_setting_on(
    api_client, acme, oidc_provider
):
    """An identity provider on a developer's machine: the browser, not the gateway, goes there."""
    authorize = f"http://127.0.0.1:{oidc_provider.port}/authorize"
    oidc_provider.discovery_overrides = {"authorization_endpoint": authorize}
    assert initiate(api_client, email="alice@acme.test").startswith(authorize + "?")


# --- At the callback ----------------------------------------------------------------------------------


def test_a_discovery_document_changed_during_a_sign_in_never_gets_the_client_secret(
    api_client, acme, oidc_provider, listener, caplog
):
    """The proved hole: the callback POSTed the client secret to an http metadata-like address."""
    callback = callback_of(oidc_provider, initiate(api_client, email="alice@acme.test"))
    oidc_provider.discovery_overrides = {"token_endpoint": f"http://127.0.0.1:{listener.port}{METADATA_PATH}"}
    cache.delete(f"sso:discovery:{acme.issuer}")  # as when the five minutes it is kept are up
    client = browser()
    response = confirm(client, open_url(client, callback))
    assert response.status_code == 401
    assert signed_in_user_id(client) is None
    assert listener.received == [] and oidc_provider.token_requests == []
    assert "token_endpoint must be an https URL" in caplog.text
    assert oidc_provider.client_secret not in caplog.text


def test_a_token_endpoint_whose_name_also_resolves_to_the_metadata_address_is_refused(
    api_client, acme, oidc_provider, dns
):
    """Every address a name resolves to is checked before any is connected to."""
    answers, _ = dns
    answers["localhost"] = ["127.0.0.1", "169.254.169.254"]
    oidc_provider.discovery_overrides = {"token_endpoint": f"https://localhost:{oidc_provider.port}/token"}
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 401
    assert signed_in_user_id(client) is None
    assert oidc_provider.authorization_requests and oidc_provider.token_requests == []


def test_each_connection_goes_to_the_address_its_one_look_up_checked(api_client, acme, oidc_provider, dns):
    """Pinned: the name is looked up once for the token call, by the check, and the connection
    uses that answer; TLS still checks the certificate for the name."""
    _, lookups = dns
    oidc_provider.discovery_overrides = {"token_endpoint": f"https://localhost:{oidc_provider.port}/token"}
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 302 and signed_in_user_id(client) is not None
    assert lookups == ["localhost"]
    assert oidc_provider.token_requests
