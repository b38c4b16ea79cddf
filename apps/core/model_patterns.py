"""Model allow-lists: which models an organization, a team or an API key may call at all.

A list holds model aliases and ``provider/model`` names, each of which may be a shell-style pattern
(``openai/gpt-4o*``, ``gpt-*``; ``fnmatch``'s ``*``, ``?`` and ``[...]``, case-sensitive as model
names are). An empty list is no restriction. Every list that applies must allow the request
(apps/proxy/routing.py): they narrow one another, none widens another.

Here, in the lowest layer, because the organizations, teams and keys each keep a list, and each
validates it in its own service with ``checked_model_patterns``; the proxy holds ``ModelAllowList``
objects, compiled once per configuration generation (one regular expression per list).
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import translate

from .errors import invalid_field

MAX_PATTERNS = 100
MAX_PATTERN_LENGTH = 200
# Printable, no whitespace: what a model name or alias can be, plus the pattern characters.
_PATTERN_TEXT = re.compile(r"[!-~]+")


def model_pattern_schema(space: str) -> str:
    """``checked_model_patterns``'s rule of one entry as the API's schema states it (its field trims
    the ``space`` around first): printable ASCII without spaces, and a provider/model with both
    parts (no '/' first, something after the first '/'). Its length is the schema's maxLength."""
    return rf"^[{space}]*[!-.0-~]+(?:/[!-~]+)?[{space}]*$"


def checked_model_patterns(patterns, *, field: str = "allowed_models") -> list[str]:
    """The list as it is kept (duplicates dropped, order kept), or InvalidRequest naming ``field``.
    None reads as the empty list: no restriction."""
    if patterns is None:
        return []
    if isinstance(patterns, str) or not isinstance(patterns, Iterable):
        raise invalid_field(field, "A list of model aliases and provider/model patterns, or null.")
    kept: list[str] = []
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern:
            raise invalid_field(f"{field}[{index}]", "A model alias or provider/model pattern.")
        if len(pattern) > MAX_PATTERN_LENGTH or not _PATTERN_TEXT.fullmatch(pattern):
            raise invalid_field(
                f"{field}[{index}]",
                f"At most {MAX_PATTERN_LENGTH} printable ASCII characters without spaces "
                "(a model alias, provider/model, or a pattern such as openai/gpt-4o*).",
            )
        provider, slash, model = pattern.partition("/")
        if slash and (not provider or not model):
            raise invalid_field(f"{field}[{index}]", "provider/model needs both parts (openai/gpt-4o*).")
        if pattern not in kept:
            kept.append(pattern)
    if len(kept) > MAX_PATTERNS:
        raise invalid_field(field, f"At most {MAX_PATTERNS} entries.")
    return kept


@dataclass(frozen=True, slots=True)
class ModelAllowList:
    """One organization's, team's or key's list, compiled."""

    patterns: tuple[str, ...]
    _matcher: re.Pattern

    @classmethod
    def of(cls, patterns: Iterable[str] | None) -> "ModelAllowList | None":
        """None for an empty list: no restriction (the proxy then skips the check)."""
        patterns = tuple(patterns or ())
        if not patterns:
            return None
        return cls(patterns, re.compile("|".join(f"(?:{translate(pattern)})" for pattern in patterns)))

    def allows(self, name: str) -> bool:
        return self._matcher.match(name) is not None
