"""An OpenTelemetry collector stand-in for the benchmark's traced case: it takes every OTLP/HTTP
export (POST /v1/traces) and answers 200 at once, counting the bytes, so that what the bench
measures is the gateway's tracing, not a collector's.

    python -m bench.otlp_sink --port 4318
"""

import argparse

from aiohttp import web

received = {"exports": 0, "bytes": 0}


async def traces(request: web.Request) -> web.Response:
    body = await request.read()
    received["exports"] += 1
    received["bytes"] += len(body)
    return web.Response(body=b"", content_type="application/x-protobuf")


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response(received)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
