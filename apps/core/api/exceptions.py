"""The management API's one exception handler.

Every error under /api/v1/ leaves as
``{"error": {"type", "code", "message", "fields"?}}`` with the right status; ``fields`` only for
validation errors. Unexpected exceptions are logged and answered with a plain 500, never a trace.
A database that cannot be reached is a 503 ``database_unavailable`` (with ``Retry-After``), sign-in
included: the request may well succeed in a moment, and nothing about it was wrong.
"""

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework_simplejwt.exceptions import InvalidToken, TokenError

from apps.core.database import UNREACHABLE_ERRORS, DatabaseUnavailable
from apps.core.errors import GatewayError, error_body

logger = logging.getLogger(__name__)

_DRF_ERRORS: dict[type[Exception], tuple[str, str]] = {
    # DRF exception -> (type, code); checked in order, so subclasses come first.
    drf.ParseError: ("invalid_request_error", "parse_error"),
    drf.ValidationError: ("invalid_request_error", "validation_error"),
    drf.NotAuthenticated: ("authentication_error", "not_authenticated"),
    drf.AuthenticationFailed: ("authentication_error", "authentication_failed"),
    drf.PermissionDenied: ("permission_error", "permission_denied"),
    drf.NotFound: ("not_found_error", "not_found"),
    drf.MethodNotAllowed: ("invalid_request_error", "method_not_allowed"),
    drf.NotAcceptable: ("invalid_request_error", "not_acceptable"),
    drf.UnsupportedMediaType: ("invalid_request_error", "unsupported_media_type"),
    drf.Throttled: ("rate_limit_error", "throttled"),
}


def management_exception_handler(exc: Exception, context: dict) -> Response:
    response = _render(exc, context)
    if response.status_code == 401:
        # RFC 9110: every 401 names the scheme the client should use.
        response.headers.setdefault("WWW-Authenticate", 'Bearer realm="management"')
    return response


def _render(exc: Exception, context: dict) -> Response:
    if isinstance(exc, UNREACHABLE_ERRORS):
        # One line, not a traceback per request (the breaker logs the outage itself); the error's
        # text is left out, as a database error may quote a value the client sent.
        view = type(context.get("view")).__name__
        logger.warning("Database unreachable in management API view %s (%s)", view, type(exc).__name__)
        exc = DatabaseUnavailable()
    if isinstance(exc, GatewayError):
        return Response(
            error_body(exc.type, exc.code, exc.message, exc.fields), status=exc.status, headers=exc.headers
        )
    if isinstance(exc, SuspiciousOperation):  # raised by Django while reading the request
        return _render_unreadable_request(exc)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    elif isinstance(exc, InvalidToken | TokenError):
        return Response(
            error_body("authentication_error", "token_not_valid", "The session token is invalid or expired."),
            status=401,
        )

    if isinstance(exc, drf.APIException):
        return _render_drf_exception(exc)

    logger.exception("Unhandled error in management API view %s", type(context.get("view")).__name__)
    return Response(
        error_body("api_error", "internal_error", "Something went wrong on our side; it has been logged."),
        status=500,
    )


def _render_unreadable_request(exc: SuspiciousOperation) -> Response:
    # Logged where Django's own handler would log it; answered as Django would (400), except a body
    # over DATA_UPLOAD_MAX_MEMORY_SIZE, which is a 413.
    logging.getLogger(f"django.security.{type(exc).__name__}").warning("%s", exc)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = f"The request body is larger than the {limit} bytes the management API accepts."
        return Response(error_body("invalid_request_error", "request_too_large", message), status=413)
    return Response(
        error_body("invalid_request_error", "bad_request", "The request could not be read."), status=400
    )


def _render_drf_exception(exc: drf.APIException) -> Response:
    error_type, code = next(
        (mapping for cls, mapping in _DRF_ERRORS.items() if isinstance(exc, cls)),
        ("invalid_request_error", "invalid_request"),
    )
    headers = {}
    if isinstance(exc, drf.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(int(exc.wait))

    if isinstance(exc, drf.ValidationError):
        fields, message = validation_fields(exc.detail)
        return Response(
            error_body(error_type, code, message, fields), status=exc.status_code, headers=headers
        )

    detail = exc.detail
    if isinstance(detail, dict):  # simplejwt's shape: {"detail": ..., "code": ...}
        message, explicit_code = str(detail.get("detail", exc.default_detail)), detail.get("code")
    elif isinstance(detail, list):
        message, explicit_code = " ".join(str(item) for item in detail), None
    else:
        message, explicit_code = str(detail), getattr(detail, "code", None)
    # An error raised with an explicit code (``AuthenticationFailed(msg, code="x")``) keeps it.
    if explicit_code and explicit_code != exc.default_code:
        code = str(explicit_code)
    return Response(error_body(error_type, code, message), status=exc.status_code, headers=headers)


def validation_fields(detail) -> tuple[dict[str, list[str]], str]:
    """Flattens DRF's nested detail into ``{"field": ["message", ...]}`` and a summary message."""
    fields: dict[str, list[str]] = {}

    def walk(value, path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "non_field_errors" and path:  # a nested object's own error is its field's
                    walk(inner, path)
                elif isinstance(key, int):  # DRF keys list items by index
                    walk(inner, f"{path}[{key}]")
                else:
                    walk(inner, f"{path}.{key}" if path else str(key))
        elif isinstance(value, list) and value and not all(isinstance(v, str) for v in value):
            for index, inner in enumerate(value):
                walk(inner, f"{path}[{index}]" if path else str(index))
        elif isinstance(value, list):
            if value:
                fields.setdefault(path or "non_field_errors", []).extend(str(v) for v in value)
        else:
            fields.setdefault(path or "non_field_errors", []).append(str(value))

    walk(detail, "")
    general = fields.pop("non_field_errors", None)
    if general:
        message = " ".join(general)
        if fields:
            fields["non_field_errors"] = general
    else:
        first_field = next(iter(fields), None)
        message = (
            f"Invalid value for '{first_field}': {fields[first_field][0]}"
            if first_field
            else "Invalid input."
        )
    return fields, message


def json_error_response(status: int, error_type: str, code: str, message: str) -> JsonResponse:
    """For the few errors raised outside DRF views (unknown /api/ paths, Django's 404/500 handlers)."""
    return JsonResponse(error_body(error_type, code, message), status=status)
