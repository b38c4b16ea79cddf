"""What a cached answer is filed under.

The fingerprint is a SHA-256 over a canonical JSON of the request with what does not change the
answer removed; everything else is kept, unknown fields included, so a parameter this module does
not know can only cause a miss, never a wrong hit. Fingerprint the body as it will be forwarded
upstream (after policies redacted it and a prompt template was rendered into it).
"""

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from apps.core.redis import redis_key

from .settings import CacheSettings

CHAT_COMPLETIONS = "chat.completions"
EMBEDDINGS = "embeddings"
RESPONSES = "responses"
MESSAGES = "messages"
ENDPOINTS = frozenset({CHAT_COMPLETIONS, EMBEDDINGS, RESPONSES, MESSAGES})
# Endpoints whose answers are cached whole only: their streams are not assembled or replayed.
WHOLE_ONLY = frozenset({RESPONSES, MESSAGES})

# Fields that change who asked, how the answer travels or what is kept upstream, never the answer.
# ``model`` is not in the fingerprint: the resolved model is in the key (entry_key), so two aliases
# of one deployment share entries and one alias re-pointed elsewhere does not.
IGNORED_FIELDS = frozenset(
    {
        "model",
        "user",
        "safety_identifier",
        "stream",
        "stream_options",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
    }
)


def _canonical_scalar(value):
    # JSON 0 and 0.0 are the same temperature: 1.0 reads as 1 so both hash alike.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def request_fingerprint(endpoint: str, body: dict) -> str:
    """Hex SHA-256 of ``endpoint`` and the answer-changing part of ``body``."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"Not a cacheable endpoint: {endpoint}")
    kept = {name: _canonical_scalar(value) for name, value in body.items() if name not in IGNORED_FIELDS}
    canonical = json.dumps([endpoint, kept], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def is_cacheable(endpoint: str, body: dict, settings: CacheSettings) -> bool:
    """Embeddings are deterministic; a chat completion, a Message or a Response only at an explicit
    temperature of 0, unless the organization widened that (an absent temperature means 1 at the
    providers). A Response only when it is not stored and continues none: a stored one is a turn of
    a conversation, with an id of its own (docs/cache.md)."""
    if not settings.enabled:
        return False
    if endpoint == EMBEDDINGS:
        return True
    if endpoint == RESPONSES and (
        body.get("store") is not False or body.get("previous_response_id") is not None
    ):
        return False
    if endpoint not in ENDPOINTS:
        return False
    if settings.any_temperature:
        return True
    temperature = body.get("temperature")
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


@lru_cache(maxsize=1024)
def region_scope(regions: frozenset[str] | None) -> str:
    """The request's allowed data regions as a key part: ``*`` when unrestricted, else the sorted
    labels. An answer is served only to requests allowed the same set, so none gets an answer made
    in a region it may not use (a team restricted to ``eu`` never gets what a US key answered).
    Labels are percent-encoded: a label (the header's are free text) cannot add a ``:`` to a key."""
    if regions is None:
        return "*"
    return "r=" + ",".join(quote(label, safe="") for label in sorted(regions))


def entry_key(
    organization_id: str, epoch: int, regions: frozenset[str] | None, resolved_model: str, fingerprint: str
) -> str:
    """The organization and its purge epoch lead the key: entries never cross organizations, and a
    purge (a new epoch) leaves every earlier entry unreachable at once; TTLs remove them. Then the
    allowed regions (``region_scope``). The model, the only part that may hold a ``:``, sits between
    parts that cannot, so two different keys never read the same."""
    return redis_key(
        "cache", str(organization_id), str(epoch), region_scope(regions), resolved_model, fingerprint
    )


# --- L3 --------------------------------------------------------------------------------------------


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


@dataclass(frozen=True, slots=True)
class SemanticQuery:
    """What L3 embeds, and the partition an answer to it may come from."""

    text: str
    # SHA-256 of everything else that shapes the answer: the parameters, the messages' roles and
    # other fields in order, and the allowed regions. Only ``text`` may differ between a request and
    # the entry that answers it; the resolved model is the index's own key part.
    partition: str


def semantic_query(body: dict[str, Any], regions: frozenset[str] | None) -> SemanticQuery | None:
    """The prompt as L3 sees it; None when L3 must not be used for this request.

    None for any part that is not text (an image, audio, a file ...): the embeddings model sees
    only the words, so two prompts with other images would read as one and the second would get
    an answer describing the first's image. Computed only when L1 and L2 missed and L3 is on, where
    an embeddings call follows anyway: the hot path does not pay for it."""
    lines: list[str] = []
    shapes: list[Any] = []
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        if isinstance(content, str):
            text, form = content, "text"
        elif isinstance(content, list):
            texts, extras = [], []
            for part in content:
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    return None
                texts.append(part["text"])
                extras.append({name: value for name, value in part.items() if name not in ("type", "text")})
            # Plain text parts read as the string they join to; a part's other fields (a cache
            # hint) stay in the partition.
            text, form = " ".join(texts), ("text" if not any(extras) else extras)
        elif content is None:
            text, form = "", None
        else:
            return None
        if text:
            lines.append(f"{message.get('role', '')}: {text}")
        shapes.append([{name: value for name, value in message.items() if name != "content"}, form])
    kept = {
        name: _canonical_scalar(value)
        for name, value in body.items()
        if name not in IGNORED_FIELDS and name != "messages"
    }
    canonical = json.dumps(
        ["l3", region_scope(regions), shapes, kept], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return SemanticQuery(text="\n".join(lines), partition=hashlib.sha256(canonical.encode()).hexdigest())
