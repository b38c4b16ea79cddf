"""Whether this server process is stopping: what the drain (gateway_project/serve.py) tells the code
that serves requests, without an import up the layers.

Two moments, in order:

- ``draining``: SIGTERM arrived. The listening socket is closed; a request that still arrives on a
  kept-alive connection is refused with a 503 (gateway_project/asgi.py; a proxy request once its key
  is read, so it has its audit entry: apps/proxy/app.py); requests in flight go on.
- ``cut``: the grace period (``GATEWAY_SHUTDOWN_GRACE_SECONDS``) is over and the requests still in
  flight are cancelled. A cancellation seen while ``cut`` is set is the shutdown's, not a client that
  went away: the proxy answers 503, or ends a started stream with an error event (apps/proxy/app.py).

Plain attributes: they are read on the event loop and written once each, on the same loop.
"""

from apps.core.errors import ServiceUnavailable


class ServerStopping(ServiceUnavailable):
    """This process is stopping: a retry reaches another one (or this one, restarted)."""

    code = "server_shutting_down"

    def __init__(
        self, message: str = "The gateway is restarting; retry the request.", *, closing=False
    ) -> None:
        headers = {"retry-after": "1", "x-should-retry": "true"}
        if closing:  # the client's retry opens a new connection, to another process
            headers["connection"] = "close"
        super().__init__(message, headers=headers)


class _State:
    draining = False
    cut = False


state = _State()


def begin_drain() -> None:
    state.draining = True


def cut_off() -> None:
    state.draining = state.cut = True
