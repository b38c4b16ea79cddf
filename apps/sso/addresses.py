"""Which identity-provider addresses the gateway may call (docs/sso.md, "Addresses").

An OpenID Connect connection's issuer is chosen by an organization's owner, and the endpoints the
gateway then calls (discovery, token, JWKS, userinfo) come from a document the issuer serves: without a
check, anyone able to start a sign-in could make the gateway connect inside its own network, and a
callback could make it POST the client secret there (server-side request forgery). The rule is the
gateway's (apps/core/addresses.py), with its own allowance:

- every URL the gateway calls is ``https``, without credentials or fragment; link-local and metadata
  addresses are always refused, private and loopback ones unless ``GATEWAY_ALLOW_PRIVATE_SSO``;
- when a connection is saved, the issuer's host is checked if it names an address without a look-up
  (an IP literal in any spelling the resolver takes, ``localhost``): its name is not looked up then,
  since an identity provider is often set up before its DNS is and an answer at saving proves nothing
  at sign-in;
- every URL of the discovery document is checked when the document is read, before it is kept: the
  ones the browser is sent to (``authorization_endpoint``, ``end_session_endpoint``) may be ``http``
  only on loopback with the allowance on (an identity provider on a developer's machine);
- every connection resolves the host once, checks every address it resolves to, and connects to
  those addresses only (``PinnedAdapter``): TLS keeps the name for SNI and the certificate check, and
  no second look-up exists for a changed DNS answer to slip into. Redirects are checked the same way,
  hop by hop, and proxies from the environment are not used (a proxy would resolve the name itself).
"""

import logging
import socket
import sys
from urllib.parse import urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPSConnection
from urllib3.connectionpool import HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection as urllib3_connection

from apps.core.addresses import AddressRefused, check_ip, ip_literal

logger = logging.getLogger(__name__)

ALLOWANCE = "GATEWAY_ALLOW_PRIVATE_SSO"
URL_MAX_LENGTH = 2000
# The discovery document's URLs the gateway itself calls, and those it sends the browser to.
SERVER_ENDPOINTS = ("token_endpoint", "jwks_uri", "userinfo_endpoint")
BROWSER_ENDPOINTS = ("authorization_endpoint", "end_session_endpoint")


class SsoAddressRefused(AddressRefused):
    code = "sso_address_refused"


class RefusedEndpoint(requests.exceptions.ConnectionError):
    """At sign-in: a URL or address of the identity provider the gateway will not call. A
    ``RequestException``, so every caller of allauth's requests treats it as an identity provider
    that cannot be used; its message names the endpoint and host, never a secret."""


def _loopback_name(host: str) -> bool:
    # RFC 6761: localhost and its subdomains are loopback, whatever a resolver would say.
    host = host.lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost")


def _check_host(host: str, *, subject: str) -> None:
    """Checks a host that names an address without a look-up; a host name passes (its addresses are
    checked when the gateway connects). Raises SsoAddressRefused."""
    address = ip_literal(host)
    if address is None and _loopback_name(host):
        address = "127.0.0.1"
    if address is not None:
        check_ip(str(address), allowance=ALLOWANCE, subject=subject, refused=SsoAddressRefused)


def check_issuer(issuer: str) -> str:
    """The issuer (already of the right form, apps/sso/validation.py) if its host may be one the
    gateway calls; SsoAddressRefused, naming the field, otherwise. No DNS look-up."""
    try:
        _check_host(urlsplit(issuer).hostname or "", subject="issuer's address")
    except SsoAddressRefused as error:
        raise SsoAddressRefused(error.message, param="issuer", fields={"issuer": [error.message]}) from None
    return issuer


def check_endpoint(url: object, *, name: str, browser: bool = False) -> None:
    """Raises RefusedEndpoint unless ``url`` is one the discovery document may give as ``name``."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX_LENGTH:
        raise RefusedEndpoint(f"The discovery document's {name} is not a URL.")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsed when read: an out-of-range or non-numeric port raises)
    except ValueError:
        raise RefusedEndpoint(f"The discovery document's {name} is not a valid URL.") from None
    host = parts.hostname or ""
    if not host or parts.username is not None or parts.password is not None or parts.fragment:
        raise RefusedEndpoint(
            f"The discovery document's {name} must have a host, and no credentials or fragment."
        )
    allowed_http = browser and getattr(settings, ALLOWANCE) and _is_loopback(host)
    if parts.scheme != "https" and not (parts.scheme == "http" and allowed_http):
        raise RefusedEndpoint(
            f"The discovery document's {name} must be an https URL"
            + (f" (http only on loopback, with {ALLOWANCE}=true)." if browser else ".")
        )
    try:
        _check_host(host, subject=f"address of the {name} ({host})")
    except SsoAddressRefused as error:
        raise RefusedEndpoint(error.message) from None


def _is_loopback(host: str) -> bool:
    address = ip_literal(host)
    return address.is_loopback if address is not None else _loopback_name(host)


def check_discovery(config: dict) -> None:
    """Checks every URL of a discovery document the gateway calls or sends a browser to; the caller
    has checked that the required ones are there. Raises RefusedEndpoint."""
    try:
        for name in SERVER_ENDPOINTS + BROWSER_ENDPOINTS:
            if name in config:
                check_endpoint(config[name], name=name, browser=name in BROWSER_ENDPOINTS)
    except RefusedEndpoint as error:
        logger.warning(
            "Single sign-on: refused the discovery document of %s: %s", config.get("issuer"), error
        )
        raise


class _Refused(Exception):
    """Raised inside urllib3 when a resolved address is refused. Not an OSError, so urllib3 neither
    retries it nor wraps it; PinnedAdapter turns it into a RefusedEndpoint."""


class _PinnedHTTPSConnection(HTTPSConnection):
    """urllib3's connection, whose socket goes to the addresses checked for its host, and nowhere
    else: one look-up, every answer checked, then each answer tried in turn (as urllib3 would).
    Everything else, TLS with the host name as SNI and for the certificate check included, is
    urllib3's."""

    def _new_conn(self) -> socket.socket:
        host = self._dns_host.strip("[]")
        try:
            infos = socket.getaddrinfo(
                host, self.port, urllib3_connection.allowed_gai_family(), socket.SOCK_STREAM
            )
        except socket.gaierror as error:
            raise NameResolutionError(self.host, self, error) from error
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        for address in addresses:
            try:
                check_ip(
                    address,
                    allowance=ALLOWANCE,
                    subject=f"identity provider address of {self.host}",
                    refused=SsoAddressRefused,
                )
            except SsoAddressRefused as error:
                raise _Refused(error.message) from None
        failure: Exception | None = None
        for address in addresses:
            try:
                sock = urllib3_connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as error:
                failure = ConnectTimeoutError(
                    self, f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
                )
                failure.__cause__ = error
            except OSError as error:
                failure = NewConnectionError(self, f"Failed to establish a new connection: {error}")
                failure.__cause__ = error
            else:
                sys.audit("http.client.connect", self, self.host, self.port)
                return sock
        raise failure or NameResolutionError(self.host, self, socket.gaierror("no address"))


class _PinnedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _PinnedHTTPSConnection


class PinnedAdapter(HTTPAdapter):
    """requests' transport for the identity providers: https only, no proxy, each connection pinned
    to the addresses checked for its host. Mounted for both schemes, so a redirect to ``http`` is
    refused too."""

    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        # This pool manager makes https pools of pinned connections, and no http pool at all.
        self.poolmanager.pool_classes_by_scheme = {"https": _PinnedHTTPSConnectionPool}

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        try:
            parts = urlsplit(request.url)
            if parts.scheme != "https" or not parts.hostname:
                raise RefusedEndpoint("The gateway calls identity providers over https only.")
            if parts.username is not None or parts.password is not None:
                raise RefusedEndpoint("An identity provider's URL must not carry credentials.")
            try:
                return super().send(
                    request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies={}
                )
            except _Refused as refused:
                raise RefusedEndpoint(str(refused)) from None
        except RefusedEndpoint as error:
            # The operator's trace; the message names a host and an address, never a secret.
            logger.warning("Single sign-on: not connecting to an identity provider: %s", error)
            error.request = request
            raise


def pin(session: requests.Session) -> requests.Session:
    """Makes ``session`` (allauth's, from the social account adapter) call identity providers only
    through PinnedAdapter."""
    session.trust_env = False  # no proxy, .netrc or CA bundle from the environment
    adapter = PinnedAdapter()
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
