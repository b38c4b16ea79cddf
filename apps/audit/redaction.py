"""What of a request's and response's bodies the audit log keeps.

Whatever the organization's setting, credentials that appear in a body (gateway API keys, whatever
their configured prefix, provider keys, bearer tokens, webhook secrets) are masked. ``redacted``
(the default) also masks personal data that is easy to recognise: e-mail addresses, card and phone
numbers. ``metadata`` keeps no body at all.
"""

import re
from functools import lru_cache

from django.conf import settings

_SECRETS = re.compile(
    # sk_live_… (the gateway's), sk-proj-… (OpenAI), sk-ant-api03-… (Anthropic) and the like
    r"(?:sk|pk|rk)[-_](?:live|test|proj|ant(?:-api\d+)?)?[-_]?[A-Za-z0-9_\-]{16,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key ids
    r"|(?i:bearer)\s+[A-Za-z0-9._\-~+/]{16,}=*"
    r"|whsec_[A-Za-z0-9+/=_\-]{16,}"
)
_PERSONAL = re.compile(
    r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}"  # e-mail
    r"|\b(?:\d[ \-]?){12,18}\d\b"  # card numbers
    r"|\+?\d{1,3}[ .\-]?\(?\d{2,4}\)?[ .\-]?\d{3,4}[ .\-]?\d{3,4}\b"  # phone numbers
)


@lru_cache(maxsize=4)
def _secrets_and_keys_of(prefix: str) -> re.Pattern[str]:
    """The credentials above, and gateway keys of the configured prefix (GATEWAY_API_KEY_PREFIX),
    which need not look like any of them."""
    if not prefix:
        return _SECRETS
    return re.compile(re.escape(prefix) + r"[A-Za-z0-9_\-]{16,}|" + _SECRETS.pattern)


def mask_secrets(text: str) -> str:
    return _secrets_and_keys_of(settings.GATEWAY_API_KEY_PREFIX).sub("[secret]", text)


def redact(text: str) -> str:
    return _PERSONAL.sub("[redacted]", mask_secrets(text))


def kept_body(raw: bytes, mode: str, limit: int) -> str:
    if mode == "metadata" or not raw:
        return ""
    text = raw[:limit].decode("utf-8", errors="replace")
    text = redact(text) if mode == "redacted" else mask_secrets(text)
    return text + ("…[truncated]" if len(raw) > limit else "")
