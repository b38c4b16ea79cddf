"""What both bridges read and write the same way: a refusal naming its field, an array, an id."""

import uuid
from typing import Any

from apps.core.errors import InvalidRequest


def refuse(param: str, message: str, code: str = "unsupported_parameter") -> InvalidRequest:
    """A 400 whose ``param`` names the field the bridge cannot take (raise it)."""
    return InvalidRequest(message, code=code, param=param)


def array(value: Any, param: str) -> list[Any]:
    """``value`` if it is an array, else a 400 naming ``param``."""
    if not isinstance(value, list):
        raise refuse(param, f"'{param}' must be an array.", "invalid_type")
    return value


def unanswered_call(messages: list[dict[str, Any]]) -> str | None:
    """The id of the first tool call (chat messages) not answered by its tool message before the
    conversation goes on, or at its end; None when every call has its answer. Both APIs refuse such
    a conversation, and a chat upstream would refuse it less clearly."""
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] in waiting:
                waiting.remove(message["tool_call_id"])
            continue
        if waiting:
            break
        waiting = [call["id"] for call in message.get("tool_calls") or ()]
    return waiting[0] if waiting else None


def new_id(prefix: str) -> str:
    """An id of the gateway's own for what it writes (resp_..., msg_..., fc_...)."""
    return f"{prefix}_{uuid.uuid4().hex}"
