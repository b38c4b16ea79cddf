"""Keeping a provider key out of what an upstream says.

Upstreams quote the key they were sent in their error messages, whole or in part: OpenAI shows its
first and last characters around a run of asterisks ("sk-abc***...wxyz"), others cut it short or
embed it in a longer string. Whatever of the key an upstream echoes must reach neither the client
nor the audit log nor the server log. Only error text goes through here, never a normal answer.

An upstream chooses how long its error text is, so every step here is linear in the text (no pattern
that backtracks over a run it has already read), and an error event's text is cut to
``ERROR_TEXT_LIMIT`` characters before it is read at all: a long message must not hold up the worker's
event loop, which serves every organization.
"""

import re

from apps.audit.redaction import mask_secrets

MASK = "[provider key]"
# Any run of this many characters of the key is the key: short enough to catch a truncated key,
# long enough not to match ordinary words by chance (a key's characters are random).
MIN_RUN = 8
# A key with its middle elided, as providers show one: a prefix, asterisks or dots, a suffix. The
# prefix starts where a run of word characters starts (the lookbehind): tried from every position
# inside a long run, as it was, the pattern read the rest of the run each time (quadratic).
_ELIDED = re.compile(r"(?<![\w\-])([\w\-]*)(?:\*{3,}|\.{3,}|…)([\w\-]*)")
# The visible end of an elided key must be this long to count (OpenAI shows the last four).
_MIN_VISIBLE = 3
# The most of an upstream's error text (an error event's message) that is scrubbed, forwarded and
# logged; the rest is cut. Longer text tells the client nothing more (docs/security.md).
ERROR_TEXT_LIMIT = 4096
# Scrubbed beyond the limit before the cut, so a credential that straddles the limit is masked whole.
_CUT_MARGIN = 256
# An error's type or code: a short word, never a text.
ERROR_FIELD_LIMIT = 200


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


def scrub_error(text: str, secret: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """An upstream's error text, cut to ``limit`` characters and scrubbed."""
    if len(text) <= limit:
        return scrub(text, secret)
    scrubbed = scrub(text[: limit + max(_CUT_MARGIN, len(secret))], secret)
    return scrubbed[:limit] + "…"


def _mask_runs(text: str, secret: str) -> str:
    """Every stretch of ``text`` covered by runs of MIN_RUN characters of ``secret`` is masked: one
    set lookup per position, linear in the text."""
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
