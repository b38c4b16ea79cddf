"""Helpers for the single sign-on tests: a connection to the test identity provider, and the
browser's part of a sign-in (following the redirects between the gateway and the provider)."""

import functools
import re
from urllib.parse import parse_qs, urlsplit

import requests
from django.test import Client

from apps.sso import services
from apps.sso.models import SsoConnection
from tests.console.conftest import csrf_token

INITIATE = "/api/v1/auth/sso/initiate"


def connect(organization, provider, *, proved: bool = True, **fields) -> SsoConnection:
    """A connection to the test identity provider; its domains proved (an operator's approval, as the
    Django admin's action does) unless ``proved`` is false."""
    fields.setdefault("allowed_domains", ["acme.test"])
    connection = services.sso_connection_create(
        organization=organization,
        data=dict(
            name=fields.pop("name", "Acme identity provider"),
            issuer=provider.issuer,
            client_id=provider.client_id,
            client_secret=provider.client_secret,
            **fields,
        ),
    )
    if proved:
        prove_domains(connection)
    return connection


def prove_domains(connection: SsoConnection, domains=None) -> None:
    """The operator's approval of the connection's domains (apps/sso/services.py, the admin's action)."""
    from apps.sso.models import SsoDomain

    for sso_domain in SsoDomain.objects.filter(
        organization_id=connection.organization_id, domain__in=domains or connection.allowed_domains
    ):
        services.sso_domain_approve(sso_domain=sso_domain, approved_by="operator@tests")


def browser() -> Client:
    return Client(enforce_csrf_checks=True)


def at_provider(provider, authorization_url: str) -> requests.Response:
    """What the identity provider answers the browser that opens ``authorization_url``."""
    session = requests.Session()
    session.request = functools.partial(session.request, verify=provider.ca_bundle, timeout=10)
    return session.get(authorization_url, allow_redirects=False)


def callback_of(provider, authorization_url: str) -> str:
    """The callback URL the provider sends the browser back to (it signs its user in, no form)."""
    response = at_provider(provider, authorization_url)
    assert response.status_code == 302, response.text
    return response.headers["Location"]


def open_url(client: Client, url: str):
    parts = urlsplit(url)
    return client.get(parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()})


def initiate(api_client, **body) -> str:
    response = api_client.post(INITIATE, body, format="json")
    assert response.status_code == 200, response.content
    return response.json()["authorization_url"]


def sso_through_api(api_client, provider, client: Client, email: str = "alice@acme.test"):
    """A sign-in started through the API and finished in ``client``, which confirms it as a person
    would: the answer to the confirmation (or the callback's, when it asks for none)."""
    response = open_url(client, callback_of(provider, initiate(api_client, email=email)))
    return confirm(client, response)


def confirm(client: Client, response):
    """Presses "Continue" on the page that asks a browser to confirm a sign-in started elsewhere."""
    if response.status_code != 200 or b"Finish signing in" not in response.content:
        return response
    page = response.content.decode()
    action = re.search(r'<form method="post" action="([^"]+)"', page).group(1).replace("&amp;", "&")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return client.post(action, {"csrfmiddlewaretoken": token})


def sso_through_console(client: Client, provider, email: str = "alice@acme.test"):
    """The console's "Sign in with SSO" button, then the provider, then the callback."""
    response = client.post(
        "/console/login/sso/", {"email": email, "csrfmiddlewaretoken": csrf_token(client, "/console/login/")}
    )
    assert response.status_code == 302, response.content
    return open_url(client, callback_of(provider, response["Location"]))


def signed_in_user_id(client: Client) -> str | None:
    return client.session.get("_auth_user_id")


def password_sign_in(client: Client, email: str, password: str):
    return client.post(
        "/console/login/",
        {"login": email, "password": password, "csrfmiddlewaretoken": csrf_token(client, "/console/login/")},
    )


def form_value(page: str, element_id: str) -> str:
    return re.search(rf'id="{element_id}"[^>]*value="([^"]+)"', page).group(1)
