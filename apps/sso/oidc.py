"""The OpenID Connect provider behind every SSO connection, for django-allauth (docs/sso.md).

Not named ``provider.py``: allauth imports every app's ``provider`` module as it starts, and this one
brings allauth's OAuth2 client (requests) and JWT into every process; its classes register with
allauth's registry when it is imported instead, by the adapter (apps/sso/adapter.py) and the sign-in
views, before allauth looks a provider up. Each active
``SsoConnection`` is one allauth app of this provider, built at request time (apps/sso/adapter.py),
whose ``provider_id`` is the connection's id. What it adds to allauth's ``openid_connect`` provider:

- PKCE (S256) on every sign-in, whatever the settings say;
- a ``nonce`` sent with every authorization request, kept with the ``state``, and compared with the
  id_token's (allauth's provider sends none and checks none);
- the issuer and every URL of its discovery document checked, and every connection to the identity
  provider pinned to checked addresses (apps/sso/addresses.py: no server-side request forgery);
- the id_token's signature always verified against the issuer's JWKS, with an asymmetric algorithm
  only (allauth skips the signature when the token came straight from the token endpoint); the
  discovery document's ``issuer`` must be the connection's, exactly;
- the client secret decrypted only when the token endpoint is called, never copied into allauth's
  ``SocialApp`` table;
- the ``state`` kept on the server (apps/sso/state.py) for a sign-in started through the API;
- the process is always a sign-in (never "connect"), and neither the scope nor the authorization
  parameters can be changed from the request.
"""

import secrets

import jwt
from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.providers import registry
from allauth.socialaccount.providers.base import Provider
from allauth.socialaccount.providers.base.constants import AuthProcess
from allauth.socialaccount.providers.oauth2.client import OAuth2Client, OAuth2Error
from allauth.socialaccount.providers.oauth2.utils import generate_code_challenge
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from allauth.utils import build_absolute_uri
from django.core.cache import cache
from django.http import HttpRequest
from django.urls import reverse
from django.utils.crypto import constant_time_compare

from . import addresses
from . import state as server_state
from .models import SsoConnection

PROVIDER = "sso"
SCOPE = ["openid", "email", "profile"]
# Only public-key signatures: an id_token signed with the client secret (HS*) or not at all is refused.
ID_TOKEN_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DISCOVERY_CACHE_SECONDS = 300


class SsoOAuth2Client(OAuth2Client):
    """allauth's client, whose secret is read from the connection (and decrypted) only when the
    token endpoint is called."""

    def __init__(self, *args, connection: SsoConnection, **kwargs) -> None:
        self._connection = connection
        super().__init__(*args, **kwargs)

    @property
    def consumer_secret(self) -> str:
        return self._connection.client_secret()

    @consumer_secret.setter
    def consumer_secret(self, value) -> None:  # allauth's __init__ sets it; the connection has it
        pass


class SsoOAuth2Adapter(OpenIDConnectOAuth2Adapter):
    # The callback view puts the sign-in's stashed state here, so complete_login can check the nonce.
    state: dict | None = None

    @property
    def connection(self) -> SsoConnection:
        if not hasattr(self, "_connection"):
            self._connection = SsoConnection.objects.select_related("organization").get(pk=self.provider_id)
        return self._connection

    @property
    def openid_config(self) -> dict:
        """The issuer's discovery document, kept a few minutes; its ``issuer`` must be the
        connection's exactly (OpenID Connect Discovery 1.0, section 4.3)."""
        if not hasattr(self, "_openid_config"):
            issuer = self.connection.issuer
            key = f"sso:discovery:{issuer}"
            config = cache.get(key)
            if not isinstance(config, dict):
                with get_adapter().get_requests_session() as session:
                    response = session.get(self.get_provider().server_url)
                    response.raise_for_status()
                    config = response.json()
                if not isinstance(config, dict):
                    raise OAuth2Error("The discovery document is not a JSON object.")
                if config.get("issuer") != issuer:
                    raise OAuth2Error("The discovery document names another issuer than the connection's.")
                for endpoint in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                    if not isinstance(config.get(endpoint), str):
                        raise OAuth2Error(f"The discovery document has no {endpoint}.")
                # Checked before it is kept: every URL in it is one the gateway may call or send a
                # browser to (the addresses its names resolve to are checked on each connection).
                addresses.check_discovery(config)
                cache.set(key, config, DISCOVERY_CACHE_SECONDS)
            self._openid_config = config
        return self._openid_config

    def get_client(self, request: HttpRequest, app) -> SsoOAuth2Client:
        return SsoOAuth2Client(
            self.request,
            app.client_id,
            None,
            self.access_token_method,
            self.access_token_url,
            self.get_callback_url(request, app),
            scope_delimiter=self.scope_delimiter,
            headers=self.headers,
            basic_auth=self.basic_auth,
            connection=self.connection,
        )

    def get_callback_url(self, request: HttpRequest, app) -> str:
        return build_absolute_uri(request, reverse("sso_callback", kwargs={"provider_id": self.provider_id}))

    def complete_login(self, request: HttpRequest, app, token, **kwargs):
        id_token = (kwargs.get("response") or {}).get("id_token")
        if not isinstance(id_token, str):
            raise OAuth2Error("The identity provider's token response has no id_token.")
        claims = self._verified_claims(app, id_token)
        data = {"id_token": claims}
        if not claims.get("email") and self.openid_config.get("userinfo_endpoint"):
            userinfo = self._fetch_user_info(token.token)
            if not isinstance(userinfo, dict) or userinfo.get("sub") != claims.get("sub"):
                raise OAuth2Error("The userinfo answer is about another subject than the id_token.")
            data["userinfo"] = userinfo
        return self.get_provider().sociallogin_from_response(request, data)

    def _verified_claims(self, app, id_token: str) -> dict:
        config = self.openid_config
        try:
            header = jwt.get_unverified_header(id_token)
            if header.get("alg") not in ID_TOKEN_ALGORITHMS:
                raise OAuth2Error("The id_token is not signed with a public-key algorithm.")
            claims = jwtkit.verify_and_decode(
                credential=id_token,
                keys_url=config["jwks_uri"],
                issuer=config["issuer"],
                audience=app.client_id,
                lookup_kid=jwtkit.lookup_kid_jwk,
                verify_signature=True,
            )
        except jwt.PyJWTError as error:
            raise OAuth2Error("The id_token is malformed.") from error
        except (KeyError, TypeError, ValueError) as error:  # a key set or header missing a member
            raise OAuth2Error("The id_token or the issuer's key set is malformed.") from error
        expected = (self.state or {}).get("nonce")
        if not expected or not constant_time_compare(str(claims.get("nonce") or ""), expected):
            raise OAuth2Error("The id_token's nonce is not this sign-in's.")
        return claims


class SsoProvider(OpenIDConnectProvider):
    id = PROVIDER
    name = "Single sign-on"
    oauth2_adapter_class = SsoOAuth2Adapter
    pkce_enabled_default = True
    supports_token_authentication = False

    def wk_server_url(self, url: str) -> str:
        # The issuer is kept exactly as given, trailing slash included (docs/sso.md).
        return url.rstrip("/") + "/.well-known/openid-configuration"

    def get_pkce_params(self) -> dict:
        return generate_code_challenge()

    def get_scope(self) -> list[str]:
        return list(SCOPE)

    def get_auth_params(self) -> dict:
        return {}

    def get_redirect_from_request_kwargs(self, request: HttpRequest) -> dict:
        # Provider's, not OAuth2Provider's: the scope and authorization parameters are not the request's.
        kwargs = Provider.get_redirect_from_request_kwargs(self, request)
        kwargs["process"] = AuthProcess.LOGIN
        return kwargs

    def redirect(self, request: HttpRequest, process, next_url=None, data=None, **kwargs):
        """The redirect to the authorization endpoint, with state, nonce and the PKCE challenge;
        ``login_hint`` is passed on, ``server_side_state`` keeps the state in the cache."""
        nonce = secrets.token_urlsafe(32)
        auth_params = {"nonce": nonce}
        login_hint = kwargs.pop("login_hint", None)
        if login_hint:
            auth_params["login_hint"] = login_hint
        self._server_side_state = bool(kwargs.pop("server_side_state", False))
        kwargs.pop("auth_params", None)
        kwargs.pop("scope", None)
        return super().redirect(
            request, AuthProcess.LOGIN, next_url, data, auth_params=auth_params, nonce=nonce, **kwargs
        )

    def stash_redirect_state(
        self, request: HttpRequest, process, next_url=None, data=None, state_id=None, **kw
    ):
        if getattr(self, "_server_side_state", False):
            state = {"process": process, "data": data, **kw}
            if next_url:
                state["next"] = next_url
            return server_state.stash(state, provider_id=self.sub_id)
        return super().stash_redirect_state(request, process, next_url, data, state_id=state_id, **kw)

    def serialize(self) -> dict:
        # By the connection's id: two organizations' identity providers may issue the same client id.
        return {"id": self.sub_id}


from .saml import SsoSamlProvider  # noqa: E402 (SAML 2.0 connections, apps/sso/saml.py)

for _provider_class in (SsoProvider, SsoSamlProvider):
    registry.register(_provider_class)
