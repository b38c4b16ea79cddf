"""Only the console's own pages open its WebSockets (the live tail).

A browser sends the session cookie with a WebSocket handshake from any page; nothing like CORS or
CSRF protects it, so the ``Origin`` header is what tells the console's own page from another's.
Channels' ``AllowedHostsOriginValidator`` compared the host alone: a page at
``http://127.0.0.1:9999`` (another program on the gateway's machine) or a plain-HTTP page of an
HTTPS console opened the tail with the session (issue 19, finding 8).

Here the whole origin must be the one Django's CSRF check accepts for a form post of the console:
the request's own (its ``Host``, validated against ``ALLOWED_HOSTS``, with ``https`` when the
handshake is secure: ``wss``, or ``X-Forwarded-Proto`` as ``SECURE_PROXY_SSL_HEADER`` says, which
``TRUST_X_FORWARDED_PROTO``/``GATEWAY_HTTPS`` set), or one of ``CSRF_TRUSTED_ORIGINS``. Scheme,
host and port are compared; a missing or opaque (``null``) origin is refused before any consumer runs.
"""

from io import BytesIO
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http.request import is_same_domain

# The page that opens a ws:// socket is an http:// page, a wss:// one an https:// page.
_PAGE_SCHEME = {"ws": "http", "wss": "https"}


def _origin_header(scope) -> str | None:
    """The one Origin header; None when there is none, or more than one (which is not a browser)."""
    values = [value for name, value in scope.get("headers", ()) if name == b"origin"]
    if len(values) != 1:
        return None
    return values[0].decode("latin-1")


def own_origin(scope) -> str | None:
    """The console's origin as the handshake reaches it, read the way Django reads a request (host
    validation, the trusted-proxy scheme header); None when the Host is not one the gateway serves."""
    page_scope = {**scope, "method": "GET", "scheme": _PAGE_SCHEME.get(scope.get("scheme") or "ws", "http")}
    request = ASGIRequest(page_scope, BytesIO())
    try:
        return f"{request.scheme}://{request.get_host()}"
    except DisallowedHost:
        return None


def _trusted(origin: str) -> bool:
    """In CSRF_TRUSTED_ORIGINS, matched as Django's CSRF check matches it (``https://*.example.com``
    for subdomains; the scheme always, the port as written)."""
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in trusted and "*" not in origin:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    for pattern in trusted:
        if "*" in pattern:
            allowed = urlsplit(pattern)
            if allowed.scheme == parsed.scheme and is_same_domain(parsed.netloc, allowed.netloc.lstrip("*")):
                return True
    return False


def origin_allowed(scope) -> bool:
    origin = _origin_header(scope)
    if not origin or origin == "null":
        return False
    return origin == own_origin(scope) or _trusted(origin)


class ConsoleOriginValidator:
    """Wraps the WebSocket application: a handshake from another origin is closed before it."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError("ConsoleOriginValidator serves WebSocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
