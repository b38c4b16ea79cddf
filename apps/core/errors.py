"""Typed errors shared by both surfaces.

Domain code raises these; one exception handler per surface renders them (the management shape in
``apps/core/api/exceptions.py``, OpenAI's shape in ``apps/proxy/errors.py``). No view builds error JSON.
"""

from collections.abc import Mapping


class GatewayError(Exception):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        param: str | None = None,
        fields: Mapping[str, list[str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.param = param
        self.fields = dict(fields) if fields else None
        self.headers = dict(headers) if headers else {}


class InvalidRequest(GatewayError):
    pass


def invalid_field(field: str, message: str) -> InvalidRequest:
    """A validation error of one field, named in the message and in ``fields``."""
    return invalid_fields({field: [message]})


def invalid_fields(errors: Mapping[str, list[str]]) -> InvalidRequest:
    """A validation error of one or more fields, in the shape a serializer's errors take: the first
    field named in the message, all of them in ``fields``."""
    first = next(iter(errors))
    return InvalidRequest(
        f"Invalid value for '{first}': {errors[first][0]}",
        code="validation_error",
        param=first,
        fields=errors,
    )


class AuthenticationFailed(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"
    code = "not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class Conflict(GatewayError):
    status = 409
    type = "conflict_error"
    code = "conflict"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class RateLimited(GatewayError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class ServiceUnavailable(GatewayError):
    status = 503
    type = "service_unavailable_error"
    code = "service_unavailable"


def error_body(error_type: str, code: str, message: str, fields: dict | None = None) -> dict:
    """The management API's error shape (docs/errors.md): what apps/core/api/exceptions.py renders,
    and what a server that is stopping answers outside the proxy (gateway_project/asgi.py)."""
    body = {"type": error_type, "code": code, "message": message}
    if fields:
        body["fields"] = fields
    return {"error": body}
