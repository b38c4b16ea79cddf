"""Keeping a provider key out of what its upstream says, below the proxy.

Upstreams quote the key they were sent in their error messages, whole or in part: OpenAI shows its
first and last characters around asterisks ("sk-abc***...wxyz"), others cut it short. The provider key
pages' "test this key" (upstream_check.py) shows the upstream's error to an admin, who must never see
the secret; the proxy (apps/proxy/scrubbing.py) masks with these rules what upstreams say to its
clients, and other credentials besides. Linear in the text: an upstream chooses how long its error is.
"""

import re

MASK = "[provider key]"
# Any run of this many characters of the key is the key: short enough to catch a truncated key,
# long enough not to match ordinary words by chance (a key's characters are random).
MIN_RUN = 8
# A key with its middle elided: a prefix, asterisks or dots, a suffix (the lookbehind starts the prefix
# where a run of word characters starts, so the pattern never rereads a run).
_ELIDED = re.compile(r"(?<![\w\-])([\w\-]*)(?:\*{3,}|\.{3,}|…)([\w\-]*)")
# The visible end of an elided key must be this long to count (OpenAI shows the last four).
_MIN_VISIBLE = 3


def scrub_key(text: str, secret: str) -> str:
    """``text`` with whatever it shows of ``secret`` masked: the whole key, an elided one, any run of
    ``MIN_RUN`` of its characters."""
    if not text or not secret:
        return text
    text = text.replace(secret, MASK)
    text = _ELIDED.sub(lambda match: MASK if _shows_part_of(match, secret) else match[0], text)
    return _mask_runs(text, secret)


def _shows_part_of(match: re.Match, secret: str) -> bool:
    before, after = match[1], match[2]
    return (len(before) >= _MIN_VISIBLE and secret.startswith(before)) or (
        len(after) >= _MIN_VISIBLE and secret.endswith(after)
    )


def _mask_runs(text: str, secret: str) -> str:
    """Every stretch of ``text`` covered by runs of MIN_RUN characters of ``secret``, masked: one set
    look-up per position."""
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
