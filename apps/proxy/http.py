"""The small HTTP layer of the lean proxy app: a request, a response, and body reading.

The proxy does not go through Django's request handling (see gateway_project/asgi.py); these
classes are what its views see instead.
"""

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from apps.audit.records import RequestRecord
from apps.core.errors import GatewayError, InvalidRequest, PayloadTooLarge

from .errors import error_body as openai_error_body
from .errors import error_event

if TYPE_CHECKING:
    from .settling import Settlement


# The ASGI callables (asgiref's types would say the same at more length).
Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class NestedTooDeeply(InvalidRequest):
    """JSON nested deeper than the interpreter can parse or encode again (a RecursionError)."""

    code = "invalid_json"

    def __init__(self) -> None:
        super().__init__("The request body is nested too deeply.")


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    # NaN, Infinity and -Infinity: Python's parser accepts them, JSON (RFC 8259) and OpenAI do not,
    # and an upstream would get them back as the same invalid tokens.
    raise _NotJson(f"{name} is not a JSON number")


# A scan of the raw bytes that says when the exact check of surrogates is worth running: a
# surrogate escape (\ud800-\udfff; a pair is fine, a lone one is not). It starts with a literal,
# so it runs at memchr speed: 5-15 ms for 20 MiB here.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON grammar that Python reads as an infinite float (written back as
    # Infinity): refused like the literal. Called for floats only; a request carries a handful.
    value = float(text)
    if value in (_INFINITY, -_INFINITY):
        raise _NotJson(f"{text[:40]} is too large for a JSON number")
    return value


_INFINITY = float("inf")


def parse_json(body: bytes) -> Any:
    """A request body as JSON, as OpenAI reads it: UTF-8, RFC 8259 (no NaN or Infinity, no number
    too large for a double), and every string one a UTF-8 upstream can be sent (no lone surrogate
    escape such as ``"\\ud800"``, which Python's parser lets through and nothing can encode).
    Raises ``InvalidRequest`` (400 ``invalid_json``) for anything else."""
    if not body:
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        text = body.decode("utf-8")
        parsed = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        if _SURROGATE_ESCAPE.search(body):
            # Encoding is the exact check; it runs only for bodies with surrogate escapes.
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest("The request body is not valid UTF-8.", code="invalid_json") from error
    except UnicodeEncodeError as error:
        raise InvalidRequest(
            "The request body is not valid JSON: a string holds a lone surrogate escape "
            "(\\ud800-\\udfff without its pair), which cannot be encoded as UTF-8.",
            code="invalid_json",
        ) from error
    except RecursionError:
        raise NestedTooDeeply() from None
    except ValueError as error:
        raise InvalidRequest(f"The request body is not valid JSON: {error}", code="invalid_json") from error
    return parsed


@dataclass(slots=True)
class ProxyRequest:
    """One request as it arrived, and what app.py sends and hands over after it: the record the
    audit log keeps, the rate-limit headers and the settlement admission leaves. Who is calling and
    with which configuration is the pipeline's (``caller.Caller`` on ``ProxyContext``), not this."""

    method: str
    path: str
    headers: dict[str, str]
    client_ip: str
    request_id: str
    record: RequestRecord  # what the audit log will keep; filled in as the request goes
    started: float = field(default_factory=time.perf_counter)
    body: bytes = b""
    # What the path names after its endpoint's prefix (the model of /v1/models/{model}); else None.
    resource: str | None = None
    # How an error answer's body is written: OpenAI's shape until the route says otherwise.
    error_body: Callable[[GatewayError], bytes] = openai_error_body
    record_handed_over: bool = False
    # Admission (admission.py): the rate-limit headers of every response, what to settle after it.
    limit_headers: dict[str, str] = field(default_factory=dict)
    settlement: "Settlement | None" = None
    # Admission's revocation check, sent before the body is read (admission.send_early); taken once.
    early_check: asyncio.Future | None = None
    # With traces on (apps/observability/tracing.py): the request's span, and its answer's finish
    # reasons for it (a whole answer's, or those a stream's chunks carried).
    span: Any = None
    finish_reasons: tuple[str, ...] = ()

    def json(self) -> Any:
        """The body as JSON (``parse_json``); anything unreadable is a 400 in OpenAI's shape."""
        return parse_json(self.body)


@dataclass(slots=True)
class ProxyResponse:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ProxyStream:
    """A streamed (server-sent events) answer: the headers go out with the first chunk."""

    chunks: AsyncGenerator[bytes, None]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    # The event that ends the stream when the gateway must cut it, in its endpoint's format.
    error_frame: Callable[[GatewayError], bytes] = error_event


def decode_headers(raw_headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    # Header names arrive lower-cased from the ASGI server; latin-1 never fails to decode.
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in raw_headers}


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
