"""Header names carry the brand word (one setting, default ``gateway``); computed once."""

from django.conf import settings


def header(name: str) -> str:
    """``header("request-id")`` -> ``x-gateway-request-id``."""
    return f"x-{settings.GATEWAY_BRAND}-{name}"
