"""What of a request's and response's bodies the audit log keeps.

Whatever the organization's setting, credentials that appear in a body (gateway API keys, whatever
their configured prefix, provider keys, bearer tokens, webhook secrets) are masked. ``redacted``
(the default) also masks personal data: e-mail addresses, phone, card (Luhn-checked) and IBAN
(checksum) numbers, US SSNs and IP addresses. ``metadata`` keeps no body at all.

The detectors are the policies' own (``apps/core/detectors.py``), and so are the markers:
``[REDACTED:secret]``, ``[REDACTED:email]`` ... This runs in the audit ingest, off the request.
"""

from functools import lru_cache

from django.conf import settings

from apps.core.detectors import PERSONAL_DETECTORS, Rule, Scanner, detector


def marker(rule: Rule) -> str:
    return f"[REDACTED:{rule.key}]"


@lru_cache(maxsize=8)
def _scanner(prefix: str, personal: bool) -> Scanner:
    # Keyed by the key prefix: ``detector("secret")`` reads it (tests change it).
    names = ("secret", *PERSONAL_DETECTORS) if personal else ("secret",)
    return Scanner([detector(name) for name in names])


def mask_secrets(text: str) -> str:
    return _scanner(settings.GATEWAY_API_KEY_PREFIX, False).sub(text, marker)[0]


def redact(text: str) -> str:
    return _scanner(settings.GATEWAY_API_KEY_PREFIX, True).sub(text, marker)[0]


def kept_body(raw: bytes, mode: str, limit: int, *, truncated: bool = False) -> str:
    """What the entry keeps of a body. ``truncated``: the server cut it already, before spooling it
    (apps/audit/records.py)."""
    if mode == "metadata" or not raw:
        return ""
    text = raw[:limit].decode("utf-8", errors="replace")
    text = redact(text) if mode == "redacted" else mask_secrets(text)
    return text + ("…[truncated]" if truncated or len(raw) > limit else "")
