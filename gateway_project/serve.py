"""The gateway's server: Daphne, with a drain on SIGTERM (``python -m gateway_project.serve``, the
same arguments as ``daphne``; scripts/run.sh and the production layout use it).

Daphne alone cancels every request in flight the moment it is told to stop: streams cut mid-body
with no error event (and recorded as client disconnects), requests with no answer at all. Here,
SIGTERM (or SIGINT) instead:

1. closes the listening sockets (a new connection is refused, so a balancer moves on) and refuses a
   request arriving on a kept-alive connection with a 503 and ``connection: close``;
2. lets the requests and streams in flight finish, for up to ``GATEWAY_SHUTDOWN_GRACE_SECONDS``;
3. cancels what is left: the proxy answers such a request 503 ``server_shutting_down``, or ends a
   started stream with that error event (apps/core/shutdown.py), and hands its audit entry over;
4. seals this process's spool file, so the ingest takes it at once, and exits 0.

Twisted runs "before shutdown" triggers before it closes any connection, and waits for the Deferred
they return: the drain is that trigger (Daphne's own, which cancels everything, is replaced).

Before it listens, it tunes the garbage collector (``tune_the_collector``). Its access log is
``access_log.AccessLog``, Daphne's line written off the request's path; Twisted's own access line,
which Daphne sends to a log it discards, is not formatted at all.
"""

import asyncio
import functools
import gc
import logging
import os
import sys

from daphne.access import AccessLogGenerator
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import defer

from apps.core import shutdown
from gateway_project.access_log import AccessLog
from gateway_project.server_processes import (
    REUSEPORT_ADDRESS,
    bound_socket,
    endpoint_arguments,
    start_listening,
)

logger = logging.getLogger("gateway_project.serve")

# Objects allocated (less those freed) between two young collections, then young collections between
# two middle ones, and middle ones between two full ones: CPython's defaults are 700, 10, 10.
COLLECTOR_THRESHOLDS = (50_000, 20, 100)


def tune_the_collector() -> None:
    """The cyclic garbage collector, tuned for a server whose requests leave almost no cyclic
    garbage (0.02 objects a request, measured): with the default thresholds, the objects of the ~32
    requests in flight were moved to the oldest generation every few young collections, and a full
    collection of ~265,000 objects stopped the event loop for 60-440 ms every ~1,000 requests: the
    p99 under load was 7x the p50 (docs/benchmarks.md, "Issue 23").

    - Young collections every 50,000 allocations instead of 700, and the older generations
      collected less often: requests finish before their objects are looked at, so few survive.
    - ``gc.freeze()`` after start-up: the modules, classes and settings loaded so far (most of the
      heap, and never garbage) are left out of every collection from now on.
    Reference counting still frees everything that is not a cycle at once."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    gc.collect()
    gc.freeze()


# How long the requests cancelled at the end of the grace period have to send their 503 or error
# event and hand their audit entry over (they only write to the socket and the spool).
CUT_SECONDS = 5.0
POLL_SECONDS = 0.05


def skip_twisted_access_line() -> None:
    """Twisted formats an access line per request (escaping the path, the referrer and the user agent)
    and writes it to Twisted's log, which Daphne sends nowhere: 2 % of a proxied request's CPU, for
    nothing. Daphne's own line (``AccessLog``) is the access log."""
    HTTPFactory.log = _discard_access_line


def _discard_access_line(factory: HTTPFactory, request) -> None:
    return None


class DrainingServer(Server):
    # Descriptors bound but not yet listening (``own_reuseport_socket``), listened on when serving.
    listen_first: list[int] = []

    def __init__(self, *args, action_logger=None, **kwargs) -> None:
        if isinstance(action_logger, AccessLogGenerator):  # Daphne's, as its command line makes it
            from django.conf import settings

            from apps.audit.records import on_record

            action_logger = AccessLog(
                action_logger.stream,
                json=settings.GATEWAY_LOG_FORMAT == "json",
                everything=settings.GATEWAY_ACCESS_LOG_ALL,
            )
            on_record(action_logger.proxy_request)  # a proxied request's line, from its record
        super().__init__(*args, action_logger=action_logger, **kwargs)

    def run(self) -> None:
        self.ports = []
        skip_twisted_access_line()
        tune_the_collector()  # the application is imported by now: its objects are frozen
        for descriptor in self.listen_first:
            start_listening(descriptor)
        try:
            super().run()
        finally:
            if isinstance(self.action_logger, AccessLog):
                self.action_logger.flush()

    def create_application(self, protocol, scope):
        queue = super().create_application(protocol, scope)
        instance = self.connections.get(protocol, {}).get("application_instance")
        # A WebSocket is left to the sweep: its close handshake still reports to Daphne.
        if instance is not None and not isinstance(protocol, WebSocketProtocol):
            instance.add_done_callback(functools.partial(self._forget_finished, protocol))
        return queue

    def _forget_finished(self, protocol, instance: asyncio.Future) -> None:
        """Each HTTP request is a "connection" of Daphne's, kept until its once-a-second sweep
        (``application_checker``) finds it finished: about a thousand finished requests held at
        1,000 requests/s, and 1.6 % of a request's CPU spent sweeping them. A request that finished
        cleanly, its answer sent, is forgotten at once; one that raised is left to the sweep, which
        logs it."""
        details = self.connections.get(protocol)
        if details is None or details.get("application_instance") is not instance:
            return
        if "disconnected" not in details or (not instance.cancelled() and instance.exception()):
            return
        del self.connections[protocol]

    def listen_success(self, port) -> None:
        self.ports.append(port)
        super().listen_success(port)

    def kill_all_applications(self):
        return defer.Deferred.fromFuture(asyncio.ensure_future(self.stop_gracefully()))

    async def stop_gracefully(self) -> None:
        from django.conf import settings

        grace = settings.GATEWAY_SHUTDOWN_GRACE_SECONDS
        shutdown.begin_drain()
        for port in self.ports:
            port.stopListening()
        waiting = self.requests_in_flight()
        logger.warning("Stopping: %d request(s) in flight, up to %.0f s to finish", len(waiting), grace)
        if not await self.until_done(grace):
            left = self.requests_in_flight()
            logger.warning("Stopping: the grace period is over; %d request(s) cut short", len(left))
            shutdown.cut_off()
            for task in left:
                task.cancel()
            await self.until_done(CUT_SECONDS)
        # What is left is not HTTP (the console's live tail) or would not end: Daphne's way.
        for details in self.connections.values():
            instance = details.get("application_instance")
            if instance is not None and not instance.done():
                instance.cancel()
        await close_upstream_sessions()
        flush_request_metrics()
        await asyncio.to_thread(seal_spool)
        await asyncio.to_thread(flush_traces)
        logger.warning("Stopped")

    def requests_in_flight(self) -> list[asyncio.Future]:
        return [
            instance
            for protocol, details in self.connections.items()
            if not isinstance(protocol, WebSocketProtocol)
            and (instance := details.get("application_instance")) is not None
            and not instance.done()
        ]

    async def until_done(self, seconds: float) -> bool:
        # Polled: Daphne keeps no event to wait on, and this runs once, at exit.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.requests_in_flight():
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(POLL_SECONDS)
        return True


async def close_upstream_sessions() -> None:
    """The upstream client's connections, closed before the loop stops (aiohttp logs an unclosed
    session and connector otherwise)."""
    from apps.proxy.upstream import close_sessions

    await close_sessions()


def flush_request_metrics() -> None:
    from apps.observability.request_metrics import request_metrics

    try:
        request_metrics.flush()  # what the last second's requests moved, before the process is gone
    except Exception:  # never in the way of sealing the spool
        logger.exception("Stopping: the last request metrics could not be added")


def flush_traces() -> None:
    from apps.observability import tracing

    tracing.shutdown()  # the last spans, batched, sent before the process is gone


def seal_spool() -> None:
    from apps.outbox.outbox import seal

    seal()


class GatewayCommandLine(CommandLineInterface):
    description = "The gateway's server: Daphne, draining requests in flight on SIGTERM"
    server_class = DrainingServer


def own_reuseport_socket(arguments: list[str]) -> list[str]:
    """Under ``GATEWAY_SERVER_SOCKET=reuseport`` (gateway_project/server_processes.py), this process
    binds its own socket on the supervisor's address and serves it. It listens only in
    ``DrainingServer.run``, once the application is loaded: a socket listening while Django starts
    would be handed its share of new connections and leave them waiting for seconds (the other
    processes' sockets serve them meanwhile). Its descriptor is Daphne's from here on (Twisted adopts
    and closes it), no longer a Python socket's."""
    address = os.environ.get(REUSEPORT_ADDRESS)
    if not address:
        return arguments
    host, _, port = address.rpartition(":")
    descriptor = bound_socket(host, int(port), reuse_port=True).detach()
    DrainingServer.listen_first.append(descriptor)
    return [*endpoint_arguments(descriptor, host), *arguments]


if __name__ == "__main__":
    sys.argv[1:] = own_reuseport_socket(sys.argv[1:])
    GatewayCommandLine.entrypoint()
