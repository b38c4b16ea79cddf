"""ASGI entry point, served by Daphne.

``/v1/`` goes straight to the lean proxy app: no Django middleware, no URL resolver, no per-request
thread hop. Everything else (management API, admin, console) goes to Django's handler.

WebSockets are the console's live tail (``apps/console/routing.py``): only from a page of the console's
own origin (scheme, host and port, or ``CSRF_TRUSTED_ORIGINS``: ``websocket_origin.py``), authenticated
by the console's session cookie.
"""

import functools
import json
import os

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")

django_app = get_asgi_application()  # sets Django up before the proxy imports models

from apps.core import shutdown  # noqa: E402
from apps.core.errors import error_body as management_error_body  # noqa: E402
from apps.proxy.app import proxy_app  # noqa: E402
from gateway_project.client_address import trust_forwarded_for  # noqa: E402
from gateway_project.health import PROBES, health_app  # noqa: E402
from gateway_project.metrics_endpoint import metrics_app  # noqa: E402
from gateway_project.websocket_origin import ConsoleOriginValidator  # noqa: E402


def _memoise_twisted_content_type_parsing() -> None:
    """Twisted parses every POST's Content-Type with the ``email`` package (to fill ``request.args``
    for HTML forms, which Daphne never reads): 12-14 % of a proxy request's CPU in make bench. The
    header has a handful of distinct values, so the parse is memoised."""
    try:
        from twisted.web import http
    except ImportError:  # not served by Daphne
        return
    parse = getattr(http, "_parseContentType", None)
    if parse is not None and not hasattr(parse, "cache_info"):
        http._parseContentType = functools.lru_cache(maxsize=256)(parse)


_memoise_twisted_content_type_parsing()


async def http_app(scope, receive, send):
    path = scope["path"]
    if path.startswith("/v1/") or path == "/v1":
        await proxy_app(scope, receive, send)  # refuses itself while stopping, with an audit entry
    elif shutdown.state.draining:
        await refuse_while_stopping(send)
    elif path in PROBES:
        await health_app(scope, receive, send)  # not Django's handler: probes load no management code
    elif path == "/metrics":
        await metrics_app(scope, receive, send)  # nor scrapes
    else:
        await django_app(scope, receive, send)


async def refuse_while_stopping(send) -> None:
    """A management or console request that arrives on a kept-alive connection once the drain began
    (new connections are refused already): a 503 in the management error shape, and the connection
    closed, so the client's retry opens a new one, to another process."""
    error = shutdown.ServerStopping(closing=True)
    body = json.dumps(management_error_body(error.type, error.code, error.message)).encode()
    headers = {**error.headers, "content-type": "application/json"}
    encoded = [(name.encode("ascii"), value.encode("ascii")) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


class ConsoleSockets:
    """The console's WebSocket routes (apps/console/routing.py), built on the first WebSocket: the
    console's code loads when someone opens its live tail, not in every server process at start-up."""

    def __init__(self) -> None:
        self.app = None

    async def __call__(self, scope, receive, send):
        if self.app is None:
            from apps.console.routing import websocket_urlpatterns

            self.app = URLRouter(websocket_urlpatterns)
        return await self.app(scope, receive, send)


# X-Forwarded-For is believed only from GATEWAY_TRUSTED_PROXIES; with none, http_app is served as is.
application = ProtocolTypeRouter(
    {
        "http": trust_forwarded_for(http_app, settings.GATEWAY_TRUSTED_PROXIES),
        "websocket": ConsoleOriginValidator(AuthMiddlewareStack(ConsoleSockets())),
    }
)
