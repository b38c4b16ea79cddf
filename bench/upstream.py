"""A zero-latency OpenAI stand-in for the benchmark, run in its own process.

It answers every POST /v1/chat/completions at once with the same small chat.completion (usage
included), or with the same answer as server-sent events when the body asks for ``stream: true``.
The bodies are encoded once at start-up so the stand-in costs as little CPU as possible: it shares
the machine with the gateway and wrk, and must never be what the benchmark measures.

    python -m bench.upstream --port 9001
"""

import argparse
import json
import sys

from aiohttp import web

MODEL = "gpt-4o-mini"
CREATED = 1_700_000_000
USAGE = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
WORDS = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS), "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    },
    separators=(",", ":"),
).encode()


EMBEDDINGS = json.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
        "model": "gpt-4o-mini",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    }
).encode()


def _chunk(delta: dict, finish: str | None = None, *, usage: dict | None = None, choices=True) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if choices
        else [],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


# One event per write, as a real provider sends them (the gateway must relay them one by one).
STREAM_EVENTS = [
    _chunk({"role": "assistant", "content": ""}),
    *(_chunk({"content": word}) for word in WORDS),
    _chunk({}, "stop"),
    _chunk({}, usage=USAGE, choices=False),
    b"data: [DONE]\n\n",
]


def _wants_stream(body: bytes) -> bool:
    # A substring test first: most bench requests are not streams, and parsing costs CPU.
    if b'"stream"' not in body:
        return False
    return json.loads(body).get("stream") is True


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    if not _wants_stream(body):
        return web.Response(body=COMPLETION, content_type="application/json")
    response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await response.prepare(request)
    for event in STREAM_EVENTS:
        await response.write(event)
    await response.write_eof()
    return response


async def embeddings(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=EMBEDDINGS, content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # Bodies up to the gateway's own limit (20 MiB by default; bench/big_bodies.py sends them).
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/healthz", healthz)
    # No access log: formatting a line per request would cost more than the answer itself.
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None, handle_signals=True)


if __name__ == "__main__":
    sys.exit(main())
