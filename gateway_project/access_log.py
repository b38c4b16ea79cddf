"""The server's access log: one line per HTTP request and WebSocket event, as Daphne writes it
(client, time, request, status, size), kept off the request's path.

Daphne's own logger formats the time with ``strftime`` and writes each line to stdout on the request
(a system call per request when stdout is unbuffered, as it is in a container): about 4 % of a
proxied request's CPU in make bench. Here a line is formatted with the second's time string made
once per second, kept in memory, and written with the others at most ``FLUSH_SECONDS`` later, or at
once when ``MAX_LINES`` are waiting, and when the server stops. A process killed with SIGKILL loses
at most that quarter second of access lines; the audit log, not this, is the record of requests.

Health probes, scrapes of ``/metrics`` and static files are not logged: a balancer's probe every few
seconds, and a page's dozen assets, would drown the requests people read the log for. Times are UTC.
"""

import asyncio
import contextlib
import time
from typing import TextIO

FLUSH_SECONDS = 0.25
MAX_LINES = 512
UNLOGGED_PREFIXES = ("/static/", "/favicon.ico")

_WEBSOCKET_ACTIONS = {
    "connecting": "WSCONNECTING",
    "rejected": "WSREJECT",
    "connected": "WSCONNECT",
    "disconnected": "WSDISCONNECT",
}


class AccessLog:
    """Daphne's action logger (``Server(action_logger=...)``): called on the event loop."""

    def __init__(self, stream: TextIO) -> None:
        from gateway_project.health import PROBES  # after Django's set-up: Daphne loads the app first

        self.unlogged_paths = frozenset((*PROBES, "/metrics"))
        self.stream = stream
        self._lines: list[str] = []
        self._flush_scheduled = False
        self._second = -1
        self._stamp = ""

    def __call__(self, protocol: str, action: str, details: dict) -> None:
        if protocol == "http" and action == "complete":
            path = details["path"]  # with its query string
            if path.partition("?")[0] in self.unlogged_paths or path.startswith(UNLOGGED_PREFIXES):
                return
            request = f"{details['method']} {path}"
            status, size = details["status"] or "-", details["size"] or "-"
        elif protocol == "websocket" and action in _WEBSOCKET_ACTIONS:
            request, status, size = f"{_WEBSOCKET_ACTIONS[action]} {details['path']}", "-", "-"
        else:
            return
        self._lines.append(f'{details["client"] or "-"} - - [{self._now()}] "{request}" {status} {size}\n')
        if len(self._lines) >= MAX_LINES:
            self.flush()
        elif not self._flush_scheduled:
            self._schedule_flush()

    def _now(self) -> str:
        """The current second as the log shows it, formatted once per second."""
        second = int(time.time())
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
        text = "".join(lines)
        # A closed or broken stdout (the terminal went away) never stops the server answering.
        with contextlib.suppress(OSError, ValueError):
            try:
                self.stream.write(text)
            except UnicodeEncodeError:  # a stream that cannot write a character (ASCII): escaped
                encoding = getattr(self.stream, "encoding", None) or "utf-8"
                self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            self.stream.flush()
