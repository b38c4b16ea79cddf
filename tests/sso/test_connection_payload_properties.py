"""Property tests of the SSO-connection payload: whatever an owner posts as a connection, the API
answers 201 with a connection whose issuer the gateway may call, or 400/409 in the management error
shape, and a refused connection leaves nothing behind. Never a 500, never the client secret in an answer.

Hypothesis builds bodies of both protocols from nearly-right values: issuers and single sign-on URLs
at public names, at every spelling of loopback, private, link-local and metadata addresses, over
http, with credentials, queries and fragments; domains well and badly formed; roles and flags of
every JSON type. The explicit examples are the addresses the review of 2026-11-26 reached (issue 19,
finding 4). Private identity providers are not allowed here (GATEWAY_ALLOW_PRIVATE_SSO off)."""

import ipaddress
import json
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from apps.sso.models import SsoConnection
from tests.sso.conftest import CONNECTIONS, new_secret
from tests.sso.test_saml_connections import CERTIFICATE

pytestmark = pytest.mark.django_db

EXAMPLES = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI stays reproducible
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

REFUSED_HOSTS = [
    "127.0.0.1",
    "127.1",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "localhost",
    "idp.localhost",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "10.0.0.8",
    "192.168.1.1",
    "169.254.169.254",
    "[fe80::1]",
    "0.0.0.0",
    "[64:ff9b::a9fe:a9fe]",
]
hosts = st.sampled_from(["login.example.com", "idp.acme.test", "8.8.8.8", *REFUSED_HOSTS])
text = st.text(st.characters(codec="utf-8"), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=2),
    max_leaves=6,
)


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` five times in six, any JSON value otherwise: most bodies get as far as the checks of
    their addresses, and every field is still tried with the wrong type."""
    return st.one_of(valid, valid, valid, valid, valid, json_values)


def usually(value: str, *others: str) -> st.SearchStrategy:
    return st.sampled_from([value] * 4 + list(others))


urls = st.builds(
    lambda scheme, credentials, host, port, path, tail: f"{scheme}://{credentials}{host}{port}{path}{tail}",
    usually("https", "http", "ftp", "HTTPS"),
    usually("", "user:pass@"),
    hosts,
    usually("", ":8443", ":0", ":99999"),
    usually("/oauth2/default", "", "/latest/meta-data/iam", "/a b"),
    usually("", "?tenant=1", "#top"),
)
domains = st.lists(
    usually("example.com", "Example.COM", "acme.test", "xn--bcher-kva.example", "127.0.0.1", "a..b", ""),
    min_size=1,
    max_size=3,
)
common = {
    "name": mostly(st.sampled_from(["Okta", "Entra"])),
    "allowed_domains": mostly(domains),
}
optional = {
    "default_role": mostly(st.sampled_from(["member", "admin", "owner"])),
    "require_sso": mostly(st.booleans()),
    "is_active": mostly(st.booleans()),
}
oidc_bodies = st.fixed_dictionaries(
    {
        **common,
        "issuer": mostly(urls),
        "client_id": mostly(st.just("0oa1b2c3d4")),
        "client_secret": mostly(st.builds(new_secret)),
    },
    optional={**optional, "protocol": st.just("oidc")},
)
saml_bodies = st.fixed_dictionaries(
    {
        **common,
        "protocol": st.just("saml"),
        "idp_entity_id": mostly(st.just("http://www.okta.com/exk1") | urls),
        "idp_sso_url": mostly(urls),
        "idp_certificate": mostly(st.just(CERTIFICATE) | st.just("-----BEGIN CERTIFICATE-----")),
    },
    optional=optional,
)


def is_refused_address(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not address.is_global


def oidc_body(issuer: str) -> dict:
    return {
        "name": "Okta",
        "issuer": issuer,
        "client_id": "0oa1b2c3d4",
        "client_secret": new_secret(),
        "allowed_domains": ["example.com"],
    }


@pytest.fixture
def no_private_identity_providers(settings):
    settings.GATEWAY_ALLOW_PRIVATE_SSO = False


@EXAMPLES
@given(body=oidc_bodies | saml_bodies)
@example(body=oidc_body("https://127.0.0.1:8443"))
@example(body=oidc_body("http://127.0.0.1/latest/meta-data/"))
@example(body=oidc_body("https://169.254.169.254"))
@example(body=oidc_body("https://2130706433/oauth2"))
def test_a_connection_is_stored_callable_or_refused_in_the_error_shape(
    body, session_client, organization, no_private_identity_providers
):
    before = SsoConnection.objects.count()

    response = session_client.post(CONNECTIONS, json.dumps(body), content_type="application/json")

    assert response.status_code in (201, 400, 409), response.content
    error = response.json().get("error", {})
    event(f"{response.status_code} {error.get('code', '')}")
    assert response["Content-Type"] == "application/json"
    secret = body.get("client_secret")
    if isinstance(secret, str) and len(secret) > 4:
        assert secret not in response.content.decode()
    if response.status_code != 201:
        error = response.json()["error"]
        assert error["code"] and error["message"]
        assert SsoConnection.objects.count() == before
        return
    created = response.json()
    SsoConnection.objects.filter(pk=created["id"]).delete()  # its domains are free for the next example
    assert SsoConnection.objects.count() == before
    # The gateway calls the issuer (discovery, token, keys): never at a private or local address. A
    # SAML single sign-on URL is only where the browser is sent (an intranet's identity provider is
    # fine there), and is https either way.
    if created.get("issuer"):
        parts = urlsplit(created["issuer"])
        assert parts.scheme == "https" and not is_refused_address(parts.hostname or ""), created["issuer"]
    if created.get("idp_sso_url"):
        assert urlsplit(created["idp_sso_url"]).scheme == "https", created["idp_sso_url"]
