"""A SAML 2.0 identity provider for the tests, served over HTTPS from a thread on 127.0.0.1.

It makes, when it starts, an RSA signing key and a self-signed certificate (the one a connection
registers as ``idp_certificate``), and a TLS certificate from a throw-away CA (tests/oidc_provider.py
makes both the same way). ``GET /sso`` takes an AuthnRequest of the HTTP-Redirect binding
(``SAMLRequest``, deflated and base64-encoded, and ``RelayState``), reads its id, its ACS URL and
its issuer (the gateway's entity id), and answers, as a real identity provider does, an HTML page
whose form posts a signed ``<samlp:Response>`` to that ACS URL: status Success, ``InResponseTo`` the
request's id, ``Destination`` and ``Recipient`` the ACS URL, an audience restriction to the issuer,
a validity window, an email NameID and the email as the ``urn:oid:0.9.2342.19200300.100.1.3``
attribute. The response is signed (RSA-SHA256, enveloped, exclusive C14N) with python3-saml's
xmlsec binding. ``GET /metadata`` answers the identity provider's metadata.

The tests change what it answers through attributes: ``email``, ``audience`` (default: the
request's issuer), ``sign_with_unknown_key``, ``valid_for`` (seconds; negative makes it expired),
``in_response_to`` (default: the request's id). ``answers`` keeps each response's XML.
"""

import base64
import datetime
import html
import secrets
import tempfile
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit
from xml.etree import ElementTree

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from onelogin.saml2.constants import OneLogin_Saml2_Constants as C
from onelogin.saml2.utils import OneLogin_Saml2_Utils

from tests.oidc_provider import _test_ca_and_certificate

PROTOCOL = "urn:oasis:names:tc:SAML:2.0:protocol"
ASSERTION = "urn:oasis:names:tc:SAML:2.0:assertion"
EMAIL_ATTRIBUTE = "urn:oid:0.9.2342.19200300.100.1.3"
EMAIL_FORMAT = "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress"
SUCCESS = "urn:oasis:names:tc:SAML:2.0:status:Success"


def _signing_pair(common_name: str) -> tuple[str, str]:
    """(private key PEM, certificate PEM), self-signed, valid a day."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM).decode()


def _instant(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Handler(BaseHTTPRequestHandler):
    server_version = "TestSAML/1"
    provider: "SamlProvider"

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query))
        if url.path == "/metadata":
            return self._answer(200, self.provider.metadata(), "application/samlmetadata+xml")
        if url.path != "/sso" or "SAMLRequest" not in query:
            return self._answer(404, "not found", "text/plain")
        try:
            request = zlib.decompress(base64.b64decode(query["SAMLRequest"]), -15).decode()
        except (ValueError, zlib.error):
            return self._answer(400, "not an AuthnRequest", "text/plain")
        self.provider.authn_requests.append(request)
        acs, response = self.provider.respond(request)
        page = (
            '<!doctype html><html><body onload="document.forms[0].submit()">'
            f'<form method="post" action="{html.escape(acs)}">'
            f'<input type="hidden" name="SAMLResponse" value="{html.escape(response)}">'
            f'<input type="hidden" name="RelayState" value="{html.escape(query.get("RelayState", ""))}">'
            "<noscript><button>Continue</button></noscript></form></body></html>"
        )
        self._answer(200, page, "text/html; charset=utf-8")

    def _answer(self, status: int, body: str, content_type: str) -> None:
        payload = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(payload)


class SamlProvider:
    """The identity provider; ``start()``/``stop()``. See the module's docstring."""

    def __init__(self, *, email: str = "alice@acme.test") -> None:
        self.key, self.certificate = _signing_pair("Gateway tests' SAML identity provider")
        self._unknown_key, self._unknown_certificate = _signing_pair("Not the registered certificate")
        self.email = email
        self.audience: str | None = None
        self.sign_with_unknown_key = False
        self.valid_for = 300
        self.in_response_to: str | None = None
        self.authn_requests: list[str] = []
        self.answers: list[str] = []
        self._folder = tempfile.TemporaryDirectory(prefix="saml-provider-")
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def reset(self) -> None:
        self.email = "alice@acme.test"
        self.audience = None
        self.sign_with_unknown_key = False
        self.valid_for = 300
        self.in_response_to = None
        self.authn_requests.clear()
        self.answers.clear()

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def entity_id(self) -> str:
        return f"{self.base_url}/metadata"

    @property
    def sso_url(self) -> str:
        return f"{self.base_url}/sso"

    @property
    def ca_bundle(self) -> str:
        return str(Path(self._folder.name) / "ca.pem")

    def respond(self, authn_request: str) -> tuple[str, str]:
        """(the ACS URL, the base64 signed response) answering ``authn_request``."""
        root = ElementTree.fromstring(authn_request)
        request_id = root.get("ID")
        acs = root.get("AssertionConsumerServiceURL")
        sp_entity_id = root.find(f"{{{ASSERTION}}}Issuer").text
        now = datetime.datetime.now(datetime.UTC)
        until = _instant(now + datetime.timedelta(seconds=self.valid_for))
        since = _instant(now - datetime.timedelta(minutes=1))
        in_response_to = self.in_response_to or request_id
        email = html.escape(self.email)
        xml = (
            f'<samlp:Response xmlns:samlp="{PROTOCOL}" xmlns:saml="{ASSERTION}" '
            f'ID="_{secrets.token_hex(16)}" Version="2.0" IssueInstant="{_instant(now)}" '
            f'Destination="{acs}" InResponseTo="{in_response_to}">'
            f"<saml:Issuer>{self.entity_id}</saml:Issuer>"
            f'<samlp:Status><samlp:StatusCode Value="{SUCCESS}"/></samlp:Status>'
            f'<saml:Assertion ID="_{secrets.token_hex(16)}" Version="2.0" IssueInstant="{_instant(now)}">'
            f"<saml:Issuer>{self.entity_id}</saml:Issuer>"
            "<saml:Subject>"
            f'<saml:NameID Format="{EMAIL_FORMAT}">{email}</saml:NameID>'
            '<saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">'
            f'<saml:SubjectConfirmationData NotOnOrAfter="{until}" Recipient="{acs}" '
            f'InResponseTo="{in_response_to}"/>'
            "</saml:SubjectConfirmation></saml:Subject>"
            f'<saml:Conditions NotBefore="{since}" NotOnOrAfter="{until}">'
            f"<saml:AudienceRestriction><saml:Audience>{self.audience or sp_entity_id}</saml:Audience>"
            "</saml:AudienceRestriction></saml:Conditions>"
            f'<saml:AuthnStatement AuthnInstant="{_instant(now)}" SessionIndex="_{secrets.token_hex(8)}">'
            "<saml:AuthnContext><saml:AuthnContextClassRef>"
            "urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport"
            "</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>"
            f'<saml:AttributeStatement><saml:Attribute Name="{EMAIL_ATTRIBUTE}">'
            f"<saml:AttributeValue>{email}</saml:AttributeValue></saml:Attribute></saml:AttributeStatement>"
            "</saml:Assertion></samlp:Response>"
        )
        key, certificate = (
            (self._unknown_key, self._unknown_certificate)
            if self.sign_with_unknown_key
            else (self.key, self.certificate)
        )
        signed = OneLogin_Saml2_Utils.add_sign(
            xml, key, certificate, sign_algorithm=C.RSA_SHA256, digest_algorithm=C.SHA256
        )
        signed = signed.decode() if isinstance(signed, bytes) else signed
        self.answers.append(signed)
        return acs, base64.b64encode(signed.encode()).decode()

    def metadata(self) -> str:
        body = "".join(self.certificate.strip().splitlines()[1:-1])
        return (
            '<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" '
            f'entityID="{self.entity_id}"><md:IDPSSODescriptor '
            'protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">'
            '<md:KeyDescriptor use="signing"><ds:KeyInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#">'
            f"<ds:X509Data><ds:X509Certificate>{body}</ds:X509Certificate></ds:X509Data></ds:KeyInfo>"
            "</md:KeyDescriptor>"
            '<md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" '
            f'Location="{self.sso_url}"/></md:IDPSSODescriptor></md:EntityDescriptor>'
        )

    def start(self) -> "SamlProvider":
        import ssl

        _, cert, key = _test_ca_and_certificate(Path(self._folder.name))
        handler = type("Handler", (_Handler,), {"provider": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        self._folder.cleanup()

    def __enter__(self) -> "SamlProvider":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
