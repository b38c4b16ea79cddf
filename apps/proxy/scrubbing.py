"""Keeping a provider key out of what an upstream says.

Upstreams quote the key they were sent in their error messages, whole or in part: OpenAI shows its
first and last characters around a run of asterisks ("sk-abc***...wxyz"), others cut it short or
embed it in a longer string. Whatever of the key an upstream echoes must reach neither the client
nor the audit log nor the server log. Only error text goes through here, never a normal answer.
"""

import re

from apps.audit.redaction import mask_secrets

MASK = "[provider key]"
# Any run of this many characters of the key is the key: short enough to catch a truncated key,
# long enough not to match ordinary words by chance (a key's characters are random).
MIN_RUN = 8
# A key with its middle elided, as providers show one: a prefix, asterisks or dots, a suffix.
_ELIDED = re.compile(r"([\w\-]*)(?:\*{3,}|\.{3,}|…)([\w\-]*)")
# The visible end of an elided key must be this long to count (OpenAI shows the last four).
_MIN_VISIBLE = 3


def scrub(text: str, secret: str) -> str:
    """``text`` without the provider key, and without any other credential the upstream quotes (a
    gateway key, a bearer token ...), as the audit log masks them in bodies."""
    if not text:
        return text
    if secret:
        text = text.replace(secret, MASK)
        text = _ELIDED.sub(lambda match: MASK if _shows_part_of(match, secret) else match[0], text)
        text = _mask_runs(text, secret)
    return mask_secrets(text)


def _mask_runs(text: str, secret: str) -> str:
    """Every stretch of ``text`` covered by runs of MIN_RUN characters of ``secret`` is masked."""
    if len(secret) < MIN_RUN:
        return text
    pieces = {secret[i : i + MIN_RUN] for i in range(len(secret) - MIN_RUN + 1)}
    spans: list[list[int]] = []
    for i in range(len(text) - MIN_RUN + 1):
        if text[i : i + MIN_RUN] in pieces:
            if spans and spans[-1][1] >= i:
                spans[-1][1] = i + MIN_RUN
            else:
                spans.append([i, i + MIN_RUN])
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        out += [text[last:start], MASK]
        last = end
    out.append(text[last:])
    return "".join(out)


def _shows_part_of(match: re.Match, secret: str) -> bool:
    before, after = match[1], match[2]
    return (len(before) >= _MIN_VISIBLE and secret.startswith(before)) or (
        len(after) >= _MIN_VISIBLE and secret.endswith(after)
    )
