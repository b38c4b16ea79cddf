"""A zero-latency OpenAI stand-in for the benchmark, run in its own process.

It answers every POST /v1/chat/completions at once with the same small chat.completion (usage
included), or with the same answer as server-sent events when the body asks for ``stream: true``.
POST /v1/responses answers the same text as a Response (OpenAI's Responses API) and POST
/v1/messages as a Message (Anthropic's Messages API), both whole only: the bench streams chat
completions alone. One server stands in for both providers: an ``openai`` key's base URL is
``http://host:port/v1``, an ``anthropic`` key's ``http://host:port`` (its adapter adds ``/v1/messages``).
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


# A Response as OpenAI sends one for a short answer (the fields the SDK reads; usage included).
RESPONSE = json.dumps(
    {
        "id": "resp_bench",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": MODEL,
        "output": [
            {
                "id": "msg_bench",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(WORDS), "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "store": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 21,
        },
    },
    separators=(",", ":"),
).encode()

# An Anthropic Message of the same text.
MESSAGE = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "".join(WORDS)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 9},
    },
    separators=(",", ":"),
).encode()

NOT_STREAMED = json.dumps(
    {"error": {"message": "The bench's stand-in streams chat completions only."}}
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


async def responses(request: web.Request) -> web.Response:
    if _wants_stream(await request.read()):
        return web.Response(status=400, body=NOT_STREAMED, content_type="application/json")
    return web.Response(body=RESPONSE, content_type="application/json")


async def messages(request: web.Request) -> web.Response:
    if _wants_stream(await request.read()):
        return web.Response(status=400, body=NOT_STREAMED, content_type="application/json")
    return web.Response(body=MESSAGE, content_type="application/json")


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
    app.router.add_post("/v1/responses", responses)  # an openai key's base URL ends in /v1
    app.router.add_post("/v1/messages", messages)  # an anthropic key's does not: its adapter adds /v1
    app.router.add_get("/healthz", healthz)
    # No access log: formatting a line per request would cost more than the answer itself.
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None, handle_signals=True)


if __name__ == "__main__":
    sys.exit(main())
