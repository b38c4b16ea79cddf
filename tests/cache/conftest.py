import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.cache.stored_answers import CachedAnswer


def completion(*, content="Paris is the capital of France.", tool_calls=None, n=1, **extra) -> dict:
    """A chat.completion as OpenAI answers it."""
    message = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "created": 1764000000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": index,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
            for index in range(n)
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
        "system_fingerprint": "fp_0123",
        **extra,
    }


def cached(body: dict | bytes, **fields) -> CachedAnswer:
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return CachedAnswer(
        body=body,
        provider=fields.get("provider", "openai"),
        model=fields.get("model", "gpt-4o-mini"),
        input_tokens=fields.get("input_tokens", 12),
        output_tokens=fields.get("output_tokens", 7),
        cached_input_tokens=fields.get("cached_input_tokens", 0),
        cost_usd=fields.get("cost_usd", Decimal("0.0000060")),
        created_at=fields.get("created_at", datetime(2026, 11, 25, 12, 0, tzinfo=UTC)),
    )


@pytest.fixture
def answer() -> CachedAnswer:
    return cached(completion())
