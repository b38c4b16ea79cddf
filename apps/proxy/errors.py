"""The proxy's one error renderer: OpenAI's shape, so OpenAI SDKs raise the right exception.

Errors leave either as a whole answer (``error_response_parts``) or, once a stream has started, as
its last event (``error_event``); both carry the same JSON.
"""

import json

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


def error_response_parts(error: GatewayError) -> tuple[int, bytes, dict[str, str]]:
    headers = dict(error.headers)
    if error.status in _NO_RETRY:
        headers.setdefault("x-should-retry", "false")
    return error.status, error_body(error), headers


def error_event(error: GatewayError) -> bytes:
    """The error as a server-sent event: the last thing a stream that failed sends."""
    return b"data: " + error_body(error) + b"\n\n"
