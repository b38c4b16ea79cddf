"""A real OpenID Connect identity provider on loopback, built with Authlib, for the tests.

It serves HTTPS on 127.0.0.1 from a thread (a certificate for 127.0.0.1 and ``localhost`` signed by a
throw-away test CA made at start-up), so the gateway talks to it exactly as to a real identity
provider: an ``https`` issuer (apps/sso/validation.py refuses any other), discovery, JWKS, token
endpoint and userinfo over TLS, verified against the CA (``GATEWAY_SSO_CA_BUNDLE``). Nothing in the
gateway is relaxed for the tests.

What it does (Authlib's ``AuthorizationServer`` with the authorization-code grant, PKCE required,
and OpenID Connect's code flow with the nonce required):

- ``GET /.well-known/openid-configuration``: the discovery document;
- ``GET /jwks``: the public RSA key (``kid`` "test-key", RS256);
- ``GET /authorize``: signs in ``provider.user`` without a form (no consent screen) and redirects
  back with ``code`` and ``state``; it refuses an unknown client, a redirect URI not registered, a
  missing nonce or PKCE challenge, as a real provider does;
- ``POST /token``: checks the client secret (``client_secret_post`` or ``_basic``), the code (once),
  the redirect URI and the PKCE verifier, and answers an access token and an id_token signed with
  the RSA key carrying ``nonce``, ``email``, ``email_verified``, ``name`` and ``sub``;
- ``GET /userinfo``: the same claims, for the access token.

Use it as a context manager (or the ``oidc_provider`` fixture of tests/sso/conftest.py)::

    from tests.oidc_provider import IdpUser, OidcProvider

    with OidcProvider(client_id="gateway", client_secret="s3cret-value") as idp:
        settings.GATEWAY_SSO_CA_BUNDLE = idp.ca_bundle   # so the gateway trusts its certificate
        # create an SsoConnection with issuer=idp.issuer, client_id, client_secret
        idp.user = IdpUser(sub="u-1", email="alice@acme.test", email_verified=True)
        ...

A gateway in a subprocess (``tests.servers.daphne_server``) is told to trust it through the
environment: ``daphne_server(tmp_path, GATEWAY_SSO_CA_BUNDLE=idp.ca_bundle)``. A browser (Playwright)
opening ``idp.issuer`` must trust the test CA too: make its context with
``ignore_https_errors=True``. The provider lives in this process, so a test changes ``idp.user``
between sign-ins while the gateway runs elsewhere.

Knobs for the tests of refusals: ``user`` (whom the next sign-in is for), ``id_token_claims``
(claims written over the id_token's, e.g. ``{"nonce": "forged"}``), ``sign_with_unknown_key``
(an id_token whose signature the JWKS does not verify), ``redirect_uris`` (None accepts any),
``discovery_overrides`` (members written over the discovery document's, e.g. another
``token_endpoint``). Every
authorization request's parameters are kept in ``authorization_requests`` and every token request's
(without the secret) in ``token_requests``.
"""

import datetime
import ipaddress
import json
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, OAuth2Error, OAuth2Request
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from joserfc.jwk import KeySet, RSAKey

KID = "test-key"


@dataclass
class IdpUser:
    """The person the provider signs in at its authorization endpoint."""

    sub: str = "idp-user-1"
    email: str = "alice@acme.test"
    email_verified: bool | None = True
    name: str = "Alice Example"

    def claims(self) -> dict:
        claims = {"sub": self.sub, "email": self.email, "name": self.name}
        if self.email_verified is not None:
            claims["email_verified"] = self.email_verified
        return claims


@dataclass
class _Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uris: list[str] | None

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(part for part in (scope or "").split() if part in {"openid", "email", "profile"})

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return self.redirect_uris is None or redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret or "", self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "authorization_code"


@dataclass
class _Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: IdpUser
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None
    auth_time: int = field(default_factory=lambda: int(time.time()))

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope

    def get_nonce(self) -> str | None:
        return self.nonce

    def get_auth_time(self) -> int:
        return self.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class _Request(OAuth2Request):
    def __init__(self, method: str, uri: str, headers: dict, data: dict) -> None:
        super().__init__(method, uri, headers=headers)
        self.payload = BasicOAuth2Payload(data)
        self._data = data

    @property
    def args(self) -> dict:
        return self._data

    @property
    def form(self) -> dict:
        return self._data


class _CodeGrant(AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

    def save_authorization_code(self, code: str, request) -> None:
        data = request.payload.data
        self.server.provider._codes[code] = _Code(
            code=code,
            client_id=request.client.get_client_id(),
            redirect_uri=data.get("redirect_uri", ""),
            scope=data.get("scope", ""),
            user=request.user,
            nonce=data.get("nonce"),
            code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method"),
        )

    def query_authorization_code(self, code: str, client) -> _Code | None:
        found = self.server.provider._codes.get(code)
        if found is not None and found.client_id == client.get_client_id():
            return found
        return None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        self.server.provider._codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: _Code) -> IdpUser:
        return authorization_code.user


class _OpenIDCode(OpenIDCode):
    def __init__(self, provider: "OidcProvider") -> None:
        super().__init__(require_nonce=True)
        self.provider = provider

    def exists_nonce(self, nonce: str, request) -> bool:
        return any(code.nonce == nonce for code in self.provider._codes.values())

    def resolve_client_private_key(self, client):
        return self.provider._unknown_key if self.provider.sign_with_unknown_key else self.provider._key

    def get_client_algorithm(self, client) -> str:
        return "RS256"

    def get_encode_header(self, client) -> dict:
        return {"alg": "RS256", "kid": KID, "typ": "JWT"}

    def get_client_claims(self, client) -> dict:
        now = int(time.time())
        return {"iss": self.provider.issuer, "aud": [client.get_client_id()], "iat": now, "exp": now + 300}

    def generate_user_info(self, user: IdpUser, scope: str) -> UserInfo:
        return UserInfo({**user.claims(), **self.provider.id_token_claims})


class _Server(AuthorizationServer):
    def __init__(self, provider: "OidcProvider") -> None:
        super().__init__(scopes_supported=["openid", "email", "profile"])
        self.provider = provider
        self.register_token_generator(
            "default", BearerTokenGenerator(lambda *a, **k: secrets.token_urlsafe(32))
        )
        self.register_grant(_CodeGrant, [CodeChallenge(required=True), _OpenIDCode(provider)])

    def query_client(self, client_id: str) -> _Client | None:
        client = self.provider._client
        return client if client_id == client.client_id else None

    def save_token(self, token: dict, request) -> None:
        self.provider._tokens[token["access_token"]] = request.user

    def create_oauth2_request(self, request) -> _Request:
        return request  # the handler builds it

    def create_json_request(self, request):
        raise NotImplementedError

    def handle_response(self, status: int, body, headers) -> tuple[int, object, list]:
        return status, body, list(headers)

    def send_signal(self, name: str, *args, **kwargs) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    server_version = "TestOIDC/1"
    provider: "OidcProvider"

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        provider = self.provider
        if url.path == "/.well-known/openid-configuration":
            return self._json(200, provider.discovery())
        if url.path == "/jwks":
            return self._json(200, provider.jwks())
        if url.path == "/authorize":
            provider.authorization_requests.append(query)
            request = self._request(query)
            try:
                grant = provider._server.get_consent_grant(request, end_user=provider.user)
            except OAuth2Error as error:  # an unknown client, a redirect URI not registered, no nonce ...
                return self._answer(*provider._server.handle_error_response(request, error))
            return self._answer(
                *provider._server.create_authorization_response(request, provider.user, grant)
            )
        if url.path == "/userinfo":
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            user = provider._tokens.get(token)
            if user is None:
                return self._json(401, {"error": "invalid_token"})
            return self._json(200, {**user.claims(), **provider.id_token_claims})
        return self._json(404, {"error": "not_found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        form = dict(parse_qsl(self.rfile.read(length).decode()))
        if url.path != "/token":
            return self._json(404, {"error": "not_found"})
        self.provider.token_requests.append({k: v for k, v in form.items() if k != "client_secret"})
        self._answer(*self.provider._server.create_token_response(self._request(form)))

    def _request(self, data: dict) -> _Request:
        headers = {key: value for key, value in self.headers.items()}
        return _Request(self.command, f"{self.provider.issuer}{self.path}", headers, data)

    def _answer(self, status: int, body, headers: list) -> None:
        payload = json.dumps(body).encode() if isinstance(body, dict) else (body or "").encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if isinstance(body, dict) and not any(name.lower() == "content-type" for name, _ in headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _json(self, status: int, body: dict) -> None:
        self._answer(status, body, [("Content-Type", "application/json"), ("Cache-Control", "no-store")])


def _test_ca_and_certificate(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate for 127.0.0.1 and localhost signed by it: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Gateway tests' OIDC CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class OidcProvider:
    """The provider; ``start()``/``stop()`` or ``with``. See the module's docstring."""

    def __init__(
        self,
        *,
        client_id: str = "gateway-test-client",
        client_secret: str | None = None,
        redirect_uris: list[str] | None = None,
        user: IdpUser | None = None,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret or f"idp-secret-{secrets.token_urlsafe(24)}"
        self.user = user or IdpUser()
        self.id_token_claims: dict = {}
        self.sign_with_unknown_key = False
        self.discovery_overrides: dict = {}
        self.authorization_requests: list[dict] = []
        self.token_requests: list[dict] = []
        self._client = _Client(self.client_id, self.client_secret, redirect_uris)
        self._codes: dict[str, _Code] = {}
        self._tokens: dict[str, IdpUser] = {}
        self._key = RSAKey.generate_key(2048, parameters={"kid": KID, "alg": "RS256", "use": "sig"})
        self._unknown_key = RSAKey.generate_key(2048, parameters={"kid": KID, "alg": "RS256", "use": "sig"})
        self._server = _Server(self)
        self._folder = tempfile.TemporaryDirectory(prefix="oidc-provider-")
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def redirect_uris(self) -> list[str] | None:
        return self._client.redirect_uris

    @redirect_uris.setter
    def redirect_uris(self, value: list[str] | None) -> None:
        self._client.redirect_uris = value

    @property
    def issuer(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        return str(Path(self._folder.name) / "ca.pem")

    def discovery(self) -> dict:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "claims_supported": ["sub", "email", "email_verified", "name"],
            **self.discovery_overrides,
        }

    def jwks(self) -> dict:
        return KeySet([self._key]).as_dict(private=False)

    def start(self) -> "OidcProvider":
        import ssl

        _ca, cert, key = _test_ca_and_certificate(Path(self._folder.name))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        handler = type("Handler", (_Handler,), {"provider": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="oidc-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        self._folder.cleanup()

    def __enter__(self) -> "OidcProvider":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
