"""Log lines as operators collect them: text by default, one JSON object per line with
``GATEWAY_LOG_FORMAT=json`` (docs/operations.md, "Logs").

Every line of a process carries the request it was written for, when one is being served: the proxy
sets ``request_id`` (and ``organization_id`` once the key is known) in the request's own context
(``contextvars``; each request is a task of its own, so requests never see each other's), the
management API's middleware (``RequestIdMiddleware``) does the same for its requests. Work a
request starts for others (a batched settle, a shared read, a timer) runs in a fresh context, so its
lines carry no one request's ids.

A path is logged (and put on a span) without the secrets a path can carry: ``loggable_path``.
"""

import json
import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson
from asgiref.sync import iscoroutinefunction, markcoroutinefunction

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
organization_id: ContextVar[str | None] = ContextVar("organization_id", default=None)

# What a LogRecord holds by itself; anything else on it came from ``extra=`` and is written too.
_STANDARD_ATTRIBUTES = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime", "taskName"}
)


_SECRET_PATH = re.compile(r"(/invitations/)[^/?]{20,}")
_SECRET_QUERY = re.compile(r"([?&](?:code|state|token|key|secret|password|signature|sig)=)[^&]*", re.I)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


def loggable_path(path: str) -> str:
    """The path without the secrets a path can carry (an invitation's token, a single sign-on
    callback's code and state) and with control characters escaped (no forged log lines)."""
    if "/invitations/" in path:
        path = _SECRET_PATH.sub(r"\1[token]", path)
    if "?" in path:
        path = _SECRET_QUERY.sub(r"\1[redacted]", path)
    return printable(path)


def printable(text: str) -> str:
    """``text`` with control characters (a line break a client sent) written as backslash-x-NN."""
    return _UNPRINTABLE.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def utc_timestamp(seconds: float) -> str:
    """ISO 8601 in UTC with milliseconds: 2026-11-26T20:41:07.123Z."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RequestContextFilter(logging.Filter):
    """Puts the request being served (if any) on every record: ``request_id``, ``organization_id``."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        if not hasattr(record, "organization_id"):
            record.organization_id = organization_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request's ids where there is one,
    the exception's traceback as one string, and what ``extra=`` added."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict = {
            "time": utc_timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in ("request_id", "organization_id"):
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        for name, value in record.__dict__.items():
            if name not in _STANDARD_ATTRIBUTES and name not in line and value is not None:
                line[name] = _request_line(value) if name == "request" else value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(line, default=repr, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # what orjson cannot write (an integer past 64 bits): the standard library can
            return json.dumps(line, default=repr)


def _request_line(request) -> str:
    """Django's ``extra={"request": ...}`` (its error lines): method and path, never the query
    string's secrets or the request's headers."""
    method = getattr(request, "method", None)
    path = getattr(request, "get_full_path", None)
    if method is None or path is None:
        return type(request).__name__
    return f"{method} {loggable_path(path())}"


class RequestIdMiddleware:
    """The management API's and the console's requests get an id too: the client's ``X-Request-ID``
    when it is a plain short token, else a new UUID; on the log lines written while serving it and
    on the response (``X-Request-ID``). Sync and async alike, so it adds no thread hop."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._serve_async(request)
        current = _request_id_of(request)
        token = request_id.set(current)
        try:
            response = self.get_response(request)
        finally:
            request_id.reset(token)
        response.headers.setdefault("X-Request-ID", current)
        return response

    async def _serve_async(self, request):
        current = _request_id_of(request)
        token = request_id.set(current)
        try:
            response = await self.get_response(request)
        finally:
            request_id.reset(token)
        response.headers.setdefault("X-Request-ID", current)
        return response


def _request_id_of(request) -> str:
    sent = request.headers.get("x-request-id", "")
    if 0 < len(sent) <= 64 and sent.replace("-", "").replace("_", "").isalnum() and sent.isascii():
        return sent
    return str(uuid.uuid4())
