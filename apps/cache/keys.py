"""What a cached answer is filed under.

The fingerprint is a SHA-256 over a canonical JSON of the request with what does not change the
answer removed; everything else is kept, unknown fields included, so a parameter this module does
not know can only cause a miss, never a wrong hit. Fingerprint the body as it will be forwarded
upstream (after policies redacted it and a prompt template was rendered into it).
"""

import hashlib
import json

from apps.core.redis import redis_key

from .settings import CacheSettings

CHAT_COMPLETIONS = "chat.completions"
EMBEDDINGS = "embeddings"
ENDPOINTS = frozenset({CHAT_COMPLETIONS, EMBEDDINGS})

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
    """Embeddings are deterministic; a chat completion only at an explicit temperature of 0, unless
    the organization widened that (an absent temperature means 1 at the providers)."""
    if not settings.enabled:
        return False
    if endpoint == EMBEDDINGS:
        return True
    if endpoint != CHAT_COMPLETIONS:
        return False
    if settings.any_temperature:
        return True
    temperature = body.get("temperature")
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


def entry_key(organization_id: str, epoch: int, resolved_model: str, fingerprint: str) -> str:
    """The organization and its purge epoch lead the key: entries never cross organizations, and a
    purge (a new epoch) leaves every earlier entry unreachable at once; TTLs remove them."""
    return redis_key("cache", str(organization_id), str(epoch), resolved_model, fingerprint)
