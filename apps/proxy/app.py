"""The lean ASGI app that serves /v1/.

It skips Django's middleware and URL resolver (about 3.5 ms a request here, see
docs/benchmarks.md) and runs a short pipeline of its own: read the request, authenticate the API
key, check the route's permission, call the view, add the gateway headers. Errors of any kind
leave in OpenAI's shape.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from django.conf import settings

from apps.core.brand import header
from apps.core.errors import GatewayError, MethodNotAllowed, NotFound

from . import views
from .auth import authenticate, require_permission
from .errors import error_response_parts
from .http import ProxyRequest, ProxyResponse, decode_headers, read_body
from .key_usage import key_usage

logger = logging.getLogger(__name__)

View = Callable[[ProxyRequest], Awaitable[ProxyResponse]]


@dataclass(frozen=True, slots=True)
class Route:
    view: View
    permissions: frozenset[str]


ROUTES: dict[str, dict[str, Route]] = {
    "/v1/models": {"GET": Route(views.list_models, frozenset({"proxy:llm", "proxy:models"}))},
}


class Headers:
    """Header names, built once from the brand setting."""

    def __init__(self) -> None:
        self.request_id = header("request-id")
        self.latency = header("latency-ms")
        self.overhead = header("overhead-ms")
        self.cache = header("cache")
        self.cost = header("cost-usd")


class ProxyApp:
    def __init__(self) -> None:
        self._headers: Headers | None = None

    @property
    def names(self) -> Headers:
        if self._headers is None:
            self._headers = Headers()
        return self._headers

    async def __call__(self, scope, receive, send) -> None:
        client = scope.get("client")
        request = ProxyRequest(
            method=scope["method"],
            path=scope["path"].rstrip("/") or "/",
            headers=decode_headers(scope["headers"]),
            client_ip=client[0] if client else "",
        )
        try:
            response = await self.handle(request, receive)
        except GatewayError as error:
            status, body, headers = error_response_parts(error)
            response = ProxyResponse(status=status, body=body, headers=headers)
        except Exception:
            logger.exception("Unhandled error in the proxy (request %s)", request.request_id)
            status, body, headers = error_response_parts(
                GatewayError(
                    "The gateway failed to handle this request; it has been logged.",
                    code="internal_error",
                    status=500,
                )
            )
            response = ProxyResponse(status=status, body=body, headers=headers)
            response.headers["x-should-retry"] = "true"
        await self.send_response(send, request, response)

    async def handle(self, request: ProxyRequest, receive) -> ProxyResponse:
        methods = ROUTES.get(request.path)
        if methods is None:
            raise NotFound(f"Unknown endpoint {request.method} {request.path}.", code="unknown_url")
        route = methods.get(request.method)
        if route is None:
            raise MethodNotAllowed(
                f"{request.method} is not allowed on {request.path}; use {', '.join(methods)}.",
                headers={"allow": ", ".join(methods)},
            )
        request.api_key = await authenticate(request.headers)
        require_permission(request.api_key, route.permissions)
        # Read only after the key is known, so anonymous clients cannot make the gateway buffer bodies.
        request.body = await read_body(receive, request.headers, settings.GATEWAY_MAX_BODY_BYTES)
        key_usage.note(request.api_key.id)
        return await route.view(request)

    async def send_response(self, send, request: ProxyRequest, response: ProxyResponse) -> None:
        names = self.names
        elapsed_ms = f"{(time.perf_counter() - request.started) * 1000:.2f}"
        headers = {
            "content-type": "application/json",
            names.request_id: request.request_id,
            "x-request-id": request.request_id,
            names.latency: elapsed_ms,
            # No upstream is waited on yet, so all of the latency is the gateway's own.
            names.overhead: elapsed_ms,
            names.cache: "bypass",
            names.cost: "0",
            **response.headers,
        }
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [
                    (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
                ],
            }
        )
        await send({"type": "http.response.body", "body": response.body})


proxy_app = ProxyApp()
