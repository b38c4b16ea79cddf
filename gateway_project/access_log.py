"""The server's access log: one line per HTTP request and WebSocket event, kept off the request's
path. A proxied request's line is the proxy's own (``proxy_request``, from the request's record:
request id, status, model, provider, cache, latency, overhead, tokens, cost; never a key, a secret or
a body); every other request's is Daphne's (client, time, request, status, size). With
``GATEWAY_LOG_FORMAT=json`` each line is a JSON object, as every other log line then is.

Daphne's own logger formats the time with ``strftime`` and writes each line to stdout on the request
(a system call per request when stdout is unbuffered, as it is in a container): about 4 % of a
proxied request's CPU in make bench. Here a line is formatted with the second's time string made
once per second, kept in memory, and written with the others at most ``FLUSH_SECONDS`` later, or at
once when ``MAX_LINES`` are waiting, and when the server stops. A process killed with SIGKILL loses
at most that quarter second of access lines; the audit log, not this, is the record of requests.

Health probes, scrapes of ``/metrics`` and static files are not logged: a balancer's probe every few
seconds, and a page's dozen assets, would drown the requests people read the log for
(``GATEWAY_ACCESS_LOG_ALL=true`` logs them too, to see a balancer's probes or a page's). A path's
secrets are not logged either: an invitation's token, and the values of query parameters that carry
codes and tokens (single sign-on's callback). Times are UTC.
"""

import asyncio
import contextlib
import time
from operator import attrgetter
from typing import Any, TextIO

import orjson

from apps.observability.logs import loggable_path, printable, utc_timestamp
from apps.observability.request_metrics import overhead_ms

FLUSH_SECONDS = 0.25
MAX_LINES = 512
UNLOGGED_PREFIXES = ("/static/", "/favicon.ico")
PROXY_PREFIX = "/v1"
LOGGER = "gateway.access"

# What a proxied request's line shows, copied off its record on the request (references only).
_PROXY_FIELDS = (
    "request_id",
    "organization_id",
    "client_ip",
    "method",
    "endpoint",
    "status",
    "error_code",
    "model",
    "requested_model",
    "provider",
    "cache",
    "latency_ms",
    "upstream_ms",
    "ttft_ms",
    "usage",
    "cost_usd",
)
_proxy_snapshot = attrgetter(*_PROXY_FIELDS)
# A text line shows these in Daphne's places; the others follow as name=value.
_IN_THE_TEXT_LINE = frozenset(("client_ip", "method", "endpoint", "status", "organization_id"))

# Several server processes write to one stdout (WEB_CONCURRENCY): a write of at most this many bytes
# to a pipe is never interleaved with another's (PIPE_BUF), so each is whole lines and no larger (a
# longer line, which a path or model name of kilobytes makes, goes alone and may interleave).
CHUNK_BYTES = 4096

_WEBSOCKET_ACTIONS = {
    "connecting": "WSCONNECTING",
    "rejected": "WSREJECT",
    "connected": "WSCONNECT",
    "disconnected": "WSDISCONNECT",
}


class AccessLog:
    """Daphne's action logger (``Server(action_logger=...)``): called on the event loop."""

    def __init__(self, stream: TextIO, *, json: bool = False, everything: bool = False) -> None:
        from gateway_project.health import PROBES  # after Django's set-up: Daphne loads the app first

        # ``everything``: probes, scrapes and static files logged too (GATEWAY_ACCESS_LOG_ALL).
        self.unlogged_paths = frozenset() if everything else frozenset((*PROBES, "/metrics"))
        self.unlogged_prefixes = () if everything else UNLOGGED_PREFIXES
        self.stream = stream
        self.json = json
        # A line, or a proxied request's snapshot and when it ended (formatted as it is written).
        self._lines: list[str | tuple[float, tuple]] = []
        self._flush_scheduled = False
        self._second = -1
        self._stamp = ""

    def __call__(self, protocol: str, action: str, details: dict) -> None:
        if protocol == "http" and action == "complete":
            path = details["path"]  # with its query string
            bare = path.partition("?")[0]
            if bare in self.unlogged_paths or path.startswith(self.unlogged_prefixes):
                return
            if bare == PROXY_PREFIX or bare.startswith(PROXY_PREFIX + "/"):
                return  # the proxy's own line says more (proxy_request)
            method, status, size = details["method"], details["status"], details["size"]
        elif protocol == "websocket" and action in _WEBSOCKET_ACTIONS:
            path, method, status, size = details["path"], _WEBSOCKET_ACTIONS[action], None, None
        else:
            return
        self._add(self._server_line(details["client"], method, loggable_path(path), status, size))

    def proxy_request(self, record) -> None:
        """The ``apps.audit.records.on_record`` listener: a proxied request's line, queued as a tuple
        and formatted when it is written."""
        self._add((time.time(), _proxy_snapshot(record)))

    def _add(self, line: str | tuple[float, tuple]) -> None:
        self._lines.append(line)
        if len(self._lines) >= MAX_LINES:
            self.flush()
        elif not self._flush_scheduled:
            self._schedule_flush()

    def _server_line(self, client, method: str, path: str, status, size) -> str:
        if self.json:
            line = {
                "time": utc_timestamp(time.time()),
                "level": "INFO",
                "logger": LOGGER,
                "message": f"{method} {path} {status or '-'}",
                "client": client,
                "method": method,
                "path": path,
                "status": status,
                "size": size,
            }
            return orjson.dumps(line).decode() + "\n"
        return f'{client or "-"} - - [{self._now()}] "{method} {path}" {status or "-"} {size or "-"}\n'

    def _proxy_line(self, ended: float, snapshot: tuple) -> str:
        values: dict[str, Any] = dict(zip(_PROXY_FIELDS, snapshot, strict=True))
        usage = values.pop("usage")
        upstream_ms = values.pop("upstream_ms")
        requested = values.pop("requested_model")
        # What the client sent may be any JSON value, of any length, with line breaks.
        values["model"] = printable(str(values["model"] or requested or ""))[:100] or None
        values["endpoint"] = printable(values["endpoint"])
        values["overhead_ms"] = round(overhead_ms(values["latency_ms"], values["ttft_ms"], upstream_ms), 2)
        values["latency_ms"] = round(values["latency_ms"], 2)
        values["input_tokens"] = usage.input_tokens if usage else 0
        values["output_tokens"] = usage.output_tokens if usage else 0
        values["cost_usd"] = f"{values['cost_usd']:f}"
        method, endpoint, status = values["method"] or "-", values["endpoint"], values["status"]
        if self.json:
            line = {
                "time": utc_timestamp(ended),
                "level": "INFO",
                "logger": LOGGER,
                "message": f"{method} {endpoint} {status}",
                **{name: value for name, value in values.items() if value is not None},
            }
            return orjson.dumps(line).decode() + "\n"
        fields = " ".join(
            f"{name}={value}"
            for name, value in values.items()
            if name not in _IN_THE_TEXT_LINE and value not in (None, "")
        )
        client, stamp = values["client_ip"] or "-", self._stamp_of(ended)
        return f'{client} - - [{stamp}] "{method} {endpoint}" {status} - {fields}\n'

    def _now(self) -> str:
        """The current second as the log shows it, formatted once per second."""
        return self._stamp_of(time.time())

    def _stamp_of(self, moment: float) -> str:
        second = int(moment)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(second))
        return self._stamp

    def _schedule_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop: nothing would run the timer
            self.flush()
            return
        self._flush_scheduled = True
        loop.call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        """Writes the lines waiting; the server calls it once more as it stops."""
        self._flush_scheduled = False
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        formatted = [line if isinstance(line, str) else self._proxy_line(*line) for line in lines]
        # A closed or broken stdout (the terminal went away) never stops the server answering.
        with contextlib.suppress(OSError, ValueError):
            for text in _chunks(formatted):
                try:
                    self.stream.write(text)
                except UnicodeEncodeError:  # a stream that cannot write a character (ASCII): escaped
                    encoding = getattr(self.stream, "encoding", None) or "utf-8"
                    self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
                self.stream.flush()


def _chunks(lines: list[str]):
    """The lines joined into writes of whole lines of at most ``CHUNK_BYTES`` (a longer line alone)."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        length = len(line.encode("utf-8", "surrogatepass")) if not line.isascii() else len(line)
        if chunk and size + length > CHUNK_BYTES:
            yield "".join(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += length
    if chunk:
        yield "".join(chunk)
