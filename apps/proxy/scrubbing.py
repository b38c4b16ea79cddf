"""Keeping a provider key out of what an upstream says.

Upstreams quote the key they were sent in their error messages, whole or in part (the rules that
find it are the providers' own, ``apps.providers.scrubbing.scrub_key``, which the provider key page's
check uses too). Whatever of the key an upstream echoes must reach neither the client nor the audit
log nor the server log; other credentials it quotes are masked as the audit log masks them. Only error
text goes through here, never a normal answer.

An upstream chooses how long its error text is, so every step here is linear in the text (no pattern
that backtracks over a run it has already read), and an error event's text is cut to
``ERROR_TEXT_LIMIT`` characters before it is read at all: a long message must not hold up the worker's
event loop, which serves every organization.
"""

from apps.audit.redaction import mask_secrets
from apps.providers.scrubbing import scrub_key

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
    return mask_secrets(scrub_key(text, secret))


def scrub_error(text: str, secret: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """An upstream's error text, cut to ``limit`` characters and scrubbed."""
    if len(text) <= limit:
        return scrub(text, secret)
    scrubbed = scrub(text[: limit + max(_CUT_MARGIN, len(secret))], secret)
    return scrubbed[:limit] + "…"
