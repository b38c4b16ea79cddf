"""The proxy's one error renderer: OpenAI's shape, so OpenAI SDKs raise the right exception."""

import json

from apps.core.errors import GatewayError

# Statuses where a client retry cannot help; the OpenAI SDKs honour x-should-retry.
_NO_RETRY = {400, 401, 402, 403, 404, 405, 409, 413, 415, 422}


def error_response_parts(error: GatewayError) -> tuple[int, bytes, dict[str, str]]:
    payload = {
        "error": {
            "message": error.message,
            "type": error.type,
            "param": error.param,
            "code": error.code,
        }
    }
    headers = dict(error.headers)
    if error.status in _NO_RETRY:
        headers.setdefault("x-should-retry", "false")
    return error.status, json.dumps(payload, separators=(",", ":")).encode(), headers
