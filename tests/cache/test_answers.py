"""Stored answers: their format, their replay as a stream the OpenAI SDK assembles into the same
message, and the assembly of a live stream into the body to store."""

import json
import random
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import openai
import pytest

from apps.cache.stored_answers import CachedAnswer, StreamAssembler, replay_stream
from tests.cache.conftest import cached, completion

TOOL_CALLS = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
    },
    {
        "id": "call_2",
        "type": "function",
        "function": {"name": "get_time", "arguments": '{"tz": "Europe/Paris"}'},
    },
]


def test_an_answer_survives_dumps_and_loads_exactly(answer):
    assert CachedAnswer.loads(answer.dumps()) == answer


def test_loads_refuses_what_is_not_an_answer_of_this_version(answer):
    data = answer.dumps()

    for damaged in (b"", data[:3], b"\x02" + data[1:], data[:10], b"\x01\x00\x00\x00\x02{}"):
        with pytest.raises(ValueError):
            CachedAnswer.loads(damaged)


def test_loads_never_unpickles():
    import pickle

    with pytest.raises(ValueError):
        CachedAnswer.loads(pickle.dumps({"body": b"x"}))


def sdk_stream(frames: list[bytes], **request):
    """The frames served to the OpenAI SDK as an upstream would, with the [DONE] the proxy adds."""
    payload = b"".join(frames) + b"data: [DONE]\n\n"

    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=payload, headers={"content-type": "text/event-stream"})

    client = openai.OpenAI(
        api_key="sk-test",
        base_url="http://gateway.test/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    return client.chat.completions.stream(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], **request
    )


def final_completion(frames: list[bytes]) -> dict:
    with sdk_stream(frames) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    return final.model_dump(exclude_none=True)


def comparable(body: dict) -> dict:
    """The fields a client reads, with the SDK's parsing extras left out."""
    body = json.loads(json.dumps(body))
    for choice in body["choices"]:
        message = choice["message"]
        message.pop("parsed", None)
        for call in message.get("tool_calls", ()):
            call["function"].pop("parsed_arguments", None)
            call.pop("index", None)  # the SDK keeps the delta's index on the assembled call
        choice.pop("logprobs", None) if choice.get("logprobs") is None else None
        for name in [name for name, value in message.items() if value is None]:
            del message[name]
    body.pop("object", None)
    return body


@pytest.mark.parametrize(
    "body",
    [
        completion(),
        completion(content="A much longer answer. " * 40),
        completion(content=""),
        completion(content=None, tool_calls=TOOL_CALLS),
        completion(content="Looking it up.", tool_calls=TOOL_CALLS[:1]),
        completion(content="Choice", n=3),
        completion(content="émoji 🚀 and ünïcode"),
    ],
    ids=["plain", "long", "empty", "tool-calls", "content-and-tool-call", "n=3", "unicode"],
)
def test_the_sdk_assembles_a_replay_into_the_stored_message(body):
    frames = replay_stream(cached(body), include_usage=True)

    assembled = final_completion(frames)

    assert comparable(assembled) == comparable(body)


def test_a_replay_is_chunks_of_the_stored_completion_without_done(answer):
    frames = replay_stream(answer, include_usage=False)
    chunks = [json.loads(frame.removeprefix(b"data: ")) for frame in frames]

    assert all(frame.startswith(b"data: ") and frame.endswith(b"\n\n") for frame in frames)
    assert b"[DONE]" not in b"".join(frames)
    assert {(c["id"], c["created"], c["model"], c["system_fingerprint"], c["object"]) for c in chunks} == {
        ("chatcmpl-abc123", 1764000000, "gpt-4o-mini-2024-07-18", "fp_0123", "chat.completion.chunk")
    }
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in chunk for chunk in chunks)


def test_a_replay_ends_with_the_usage_frame_when_the_client_asked_for_it(answer):
    last = json.loads(replay_stream(answer, include_usage=True)[-1].removeprefix(b"data: "))

    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}


def test_logprobs_reach_the_sdk_whole():
    logprobs = {
        "content": [
            {"token": "Paris", "logprob": -0.01, "bytes": [80, 97, 114, 105, 115], "top_logprobs": []}
        ],
        "refusal": None,
    }
    body = completion(content="Paris")
    body["choices"][0]["logprobs"] = logprobs

    assembled = final_completion(replay_stream(cached(body), include_usage=False))

    assert assembled["choices"][0]["logprobs"]["content"] == logprobs["content"]


# --- Assembly ------------------------------------------------------------------------------------


def assemble(frames: bytes, cuts: list[int] | None = None) -> bytes | None:
    assembler = StreamAssembler()
    cuts = sorted(cuts or [])
    for start, end in zip([0, *cuts], [*cuts, len(frames)], strict=True):
        assembler.feed(frames[start:end])
    return assembler.result()


@pytest.mark.parametrize(
    "body",
    [completion(), completion(content=None, tool_calls=TOOL_CALLS), completion(content="x" * 500, n=2)],
    ids=["plain", "tool-calls", "n=2"],
)
def test_a_stream_split_anywhere_assembles_into_the_completion(body):
    stream = b"".join(replay_stream(cached(body), include_usage=True)) + b"data: [DONE]\n\n"
    rng = random.Random(11)

    expected = comparable(body)
    assert comparable(json.loads(assemble(stream))) == expected
    assert comparable(json.loads(assemble(stream, list(range(1, len(stream)))))) == expected  # byte by byte
    for _ in range(50):
        cuts = rng.sample(range(1, len(stream)), rng.randint(1, 20))
        assert comparable(json.loads(assemble(stream, cuts))) == expected


def test_it_reads_crlf_lines_comments_and_a_stream_without_done(answer):
    stream = b"".join(replay_stream(answer, include_usage=True))
    crlf = b": keep-alive\r\n\r\n" + stream.replace(b"\n", b"\r\n")

    assert json.loads(assemble(crlf, [5, 17, len(crlf) // 2])) == json.loads(assemble(stream))
    assert (
        json.loads(assemble(stream))["choices"][0]["message"]["content"] == "Paris is the capital of France."
    )


def test_the_assembled_body_keeps_the_upstreams_usage_and_identity(answer):
    body = json.loads(assemble(b"".join(replay_stream(answer, include_usage=True))))

    assert body["object"] == "chat.completion"
    assert (body["id"], body["model"], body["system_fingerprint"]) == (
        "chatcmpl-abc123",
        "gpt-4o-mini-2024-07-18",
        "fp_0123",
    )
    assert body["usage"] == json.loads(answer.body)["usage"]


def test_a_cut_stream_or_an_error_event_gives_nothing(answer):
    frames = replay_stream(answer, include_usage=False)
    whole = b"".join(frames)
    error = b'data: {"error": {"message": "upstream went away", "type": "api_error"}}\n\n'

    assert assemble(b"".join(frames[:-1])) is None  # no finish_reason
    assert assemble(whole[:-1]) is None  # the last event never ended
    assert assemble(b"".join(frames[:-1]) + error) is None
    assert assemble(whole + error) is None
    assert assemble(b"event: error\ndata: {}\n\n" + whole) is None
    assert assemble(b"data: not json\n\n" + whole) is None
    assert assemble(b"") is None


def test_a_stream_larger_than_an_entry_may_be_is_not_assembled():
    assembler = StreamAssembler(max_bytes=1000)
    for frame in replay_stream(cached(completion(content="y" * 5000)), include_usage=False):
        assembler.feed(frame)

    assert assembler.result() is None


def test_cost_and_time_keep_their_types(answer):
    loaded = CachedAnswer.loads(
        cached(
            completion(), cost_usd=Decimal("0.000000001"), created_at=datetime(2026, 1, 1, tzinfo=UTC)
        ).dumps()
    )

    assert loaded.cost_usd == Decimal("0.000000001")
    assert loaded.created_at == datetime(2026, 1, 1, tzinfo=UTC)
