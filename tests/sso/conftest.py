import secrets

import pytest
from django.db.models.signals import pre_save

from apps.core.crypto import InvalidToken
from apps.sso.models import SsoConnection
from tests.console.conftest import console_for  # noqa: F401 (the console's signed-in clients, a fixture)
from tests.secret_scan import ledger

CONNECTIONS = "/api/v1/sso/connections"


@pytest.fixture(scope="session", autouse=True)
def _sso_client_secrets_in_the_secret_scan():
    """Every client secret stored in these tests goes into the run's secret scan
    (tests/secret_scan.py): none may be found in a log, the audit log or a file the run leaves."""

    def record(sender, instance: SsoConnection, **kwargs) -> None:
        if instance.client_secret_encrypted:
            try:
                ledger.add(instance.client_secret())
            except InvalidToken:
                return

    pre_save.connect(record, sender=SsoConnection, weak=False, dispatch_uid="sso-secrets-ledger")
    yield
    pre_save.disconnect(sender=SsoConnection, dispatch_uid="sso-secrets-ledger")


def new_secret() -> str:
    secret = f"oidc-secret-{secrets.token_urlsafe(24)}"
    ledger.add(secret)
    return secret


def connection_body(**fields) -> dict:
    body = {
        "name": "Okta",
        "issuer": "https://login.example.com/oauth2/default",
        "client_id": "0oa1b2c3d4",
        "client_secret": new_secret(),
        "allowed_domains": ["example.com"],
    }
    body.update(fields)
    return body


def create_connection(client, **fields) -> dict:
    response = client.post(CONNECTIONS, connection_body(**fields), format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture(scope="session")
def _identity_provider():
    """One identity provider for the run (its keys and certificate take a moment to make)."""
    from tests.oidc_provider import OidcProvider

    provider = OidcProvider(client_secret=new_secret()).start()
    yield provider
    provider.stop()


@pytest.fixture
def oidc_provider(_identity_provider, settings):
    """The run's identity provider (tests/oidc_provider.py), reset to sign in the default user, and
    trusted by the gateway (its test CA as ``GATEWAY_SSO_CA_BUNDLE``)."""
    from tests.oidc_provider import IdpUser

    provider = _identity_provider
    provider.user = IdpUser()
    provider.id_token_claims = {}
    provider.sign_with_unknown_key = False
    provider.discovery_overrides = {}
    provider.redirect_uris = None
    provider.authorization_requests.clear()
    provider.token_requests.clear()
    settings.GATEWAY_SSO_CA_BUNDLE = provider.ca_bundle
    return provider
