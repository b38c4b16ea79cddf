"""One stored turn of a Responses conversation, as the proxy hands it over and the stores keep it.

A turn is kept in two places: the hot tier (``hot.py``: this process, or Redis for every process and
node), where a follow-up made a moment later finds it at once, and the database, written by the
outbox's ingest, where it stays for the organization's retention period. In both, what the turn
says (its items and its Response) is encrypted (``apps/core/crypto.py``); the ids that find it are not.
"""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from apps.core import crypto


@dataclass(frozen=True, slots=True)
class StoredTurn:
    response_id: str
    organization_id: str
    native: bool
    model: str
    created_at: datetime
    provider_key_id: str | None = None  # native: the key whose upstream holds the response
    api_key_id: str | None = None
    team_id: str | None = None  # the team it was made for: only that team's requests find it
    # Bridged only: the ids of the turns before this one, oldest first; this turn's input and
    # output items; the Response as GET /v1/responses/{id} answers it.
    history: tuple[str, ...] = ()
    input: list[Any] = field(default_factory=list)
    output: list[Any] = field(default_factory=list)
    response: dict[str, Any] | None = None

    def items(self) -> list[Any]:
        """What this turn adds to the conversation: its input items, then its output items."""
        return [*self.input, *self.output]


def seal(turn: StoredTurn) -> dict[str, Any]:
    """The turn as a plain payload (the spool's, the hot tier's): its content encrypted."""
    content = ""
    if not turn.native:
        plain = {
            "history": list(turn.history),
            "input": turn.input,
            "output": turn.output,
            "response": turn.response,
        }
        content = crypto.encrypt(json.dumps(plain, ensure_ascii=False, separators=(",", ":")))
    return {
        "response_id": turn.response_id,
        "organization_id": turn.organization_id,
        "native": turn.native,
        "model": turn.model,
        "created_at": turn.created_at.isoformat(),
        "provider_key_id": turn.provider_key_id,
        "api_key_id": turn.api_key_id,
        "team_id": turn.team_id,
        "content": content,
    }


def unseal(payload: dict[str, Any]) -> StoredTurn:
    """The turn of a ``seal``ed payload. Raises ``ValueError`` for one it cannot read (damaged, or
    encrypted with a key no longer configured)."""
    content: dict[str, Any] = {}
    if payload.get("content"):
        try:
            content = json.loads(crypto.decrypt(payload["content"]))
        except crypto.InvalidToken as error:
            raise ValueError("a stored turn no configured key decrypts") from error
    try:
        return StoredTurn(
            response_id=payload["response_id"],
            organization_id=payload["organization_id"],
            native=bool(payload["native"]),
            model=payload["model"],
            created_at=datetime.fromisoformat(payload["created_at"]),
            provider_key_id=payload.get("provider_key_id"),
            api_key_id=payload.get("api_key_id"),
            team_id=payload.get("team_id"),
            history=tuple(content.get("history") or ()),
            input=content.get("input") or [],
            output=content.get("output") or [],
            response=content.get("response"),
        )
    except (KeyError, TypeError) as error:
        raise ValueError("a stored turn without its fields") from error
