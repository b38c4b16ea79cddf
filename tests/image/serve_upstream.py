"""The tests' stand-in provider (tests/upstreams.py's ``UpstreamServer``) as a service of the compose
test (tests/image/compose.test.yaml): run in the gateway's image with the repository's ``tests/``
mounted read-only, listening on every address of its container (``0.0.0.0:$UPSTREAM_PORT``, 8080) so
the gateway's containers reach it at ``http://upstream:8080`` on the compose network.

``UpstreamServer.start()`` binds loopback on a free port (the tests' own); this binds the socket
itself and hands it to the same serving coroutine. The image has no pytest (a development
dependency): tests/upstreams.py only decorates its fixtures with it, so a stand-in decorator does.
"""

import asyncio
import os
import signal
import socket
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
if "pytest" not in sys.modules:
    try:
        import pytest  # noqa: F401
    except ImportError:
        sys.modules["pytest"] = types.SimpleNamespace(fixture=lambda function=None, **_: function)

from tests.upstreams import UpstreamServer


def main() -> None:
    port = int(os.environ.get("UPSTREAM_PORT", "8080"))
    server = UpstreamServer("compose")
    listening = socket.create_server(("0.0.0.0", port), reuse_port=False)
    loop = asyncio.new_event_loop()
    server._loop, server._port = loop, port  # what start() records, for base_url and behave()
    loop.run_until_complete(server._serve(listening))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"upstream: serving on 0.0.0.0:{port}", flush=True)
    loop.run_until_complete(stop.wait())
    loop.run_until_complete(server._shutdown())
    loop.close()


if __name__ == "__main__":
    main()
