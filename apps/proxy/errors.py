"""The proxy's error renderers: OpenAI's shape, so OpenAI SDKs raise the right exception, and
Anthropic's for the Messages API (``anthropic_error_body``), so the Anthropic SDK does.

Errors leave either as a whole answer (``error_response_parts``) or, once a stream has started, as
its last event (``error_event``); both carry the same JSON.
"""

import json
from collections.abc import Callable

from apps.core.brand import header_names
from apps.core.errors import GatewayError

# Statuses where a client retry cannot help; the OpenAI SDKs honour x-should-retry.
_NO_RETRY = {400, 401, 402, 403, 404, 405, 409, 413, 415, 422}


class InternalError(GatewayError):
    """Anything the gateway did not expect: logged with its traceback, told to the client as this."""

    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self) -> None:
        super().__init__(
            "The gateway failed to handle this request; it has been logged.",
            headers={"x-should-retry": "true"},
        )


class StreamInterrupted(GatewayError):
    """A started stream that ended before its answer was complete (its headers said 200)."""

    status = 502
    type = "upstream_error"
    code = "stream_interrupted"


def error_body(error: GatewayError) -> bytes:
    payload = {
        "error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}
    }
    return json.dumps(payload, separators=(",", ":")).encode()


# Anthropic's error types by status (its SDK raises by status; the type names the kind).
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_body(error: GatewayError) -> bytes:
    """``{"type": "error", "error": {"type", "message"}}``, Anthropic's shape: the type by status
    (``invalid_request_error`` for the other 4xx, ``api_error`` for the other 5xx)."""
    kind = _ANTHROPIC_TYPES.get(error.status) or (
        "invalid_request_error" if error.status < 500 else "api_error"
    )
    payload = {"type": "error", "error": {"type": kind, "message": error.message}}
    return json.dumps(payload, separators=(",", ":")).encode()


def error_response_parts(
    error: GatewayError, body: Callable[[GatewayError], bytes] = error_body
) -> tuple[int, bytes, dict[str, str]]:
    headers = dict(error.headers)
    if error.status in _NO_RETRY:
        headers.setdefault("x-should-retry", "false")
    # The gateway's own code, whatever the API's shape has room for (Anthropic's has none).
    headers.setdefault(header_names().error_code, error.code)
    return error.status, body(error), headers


def error_event(error: GatewayError) -> bytes:
    """The error as a server-sent event: the last thing a stream that failed sends."""
    return b"data: " + error_body(error) + b"\n\n"
