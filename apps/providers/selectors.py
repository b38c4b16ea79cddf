"""Reads of provider keys."""

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.db.models import QuerySet

from apps.core.crypto import InvalidToken

from .addresses import AddressRefused, check_ip
from .models import ProviderKey

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProviderKeySnapshot:
    """A usable provider key as the proxy holds it: its secret decrypted, plain data."""

    id: str
    provider: str
    secret: str
    weight: float
    data_region: str
    base_url: str
    api_version: str
    supports_stream_usage: bool
    speaks_responses: bool = False


def _usable_address(base_url: str) -> bool:
    """Hosts given as IP literals are checked here (aiohttp does not resolve them); names are
    checked on every connection by the upstream client's resolver."""
    host = urlsplit(base_url).hostname or ""
    try:
        check_ip(host)
    except ValueError:
        return True  # a name, not an address
    except AddressRefused:
        return False
    return True


def usable_provider_keys(organization_id) -> tuple[ProviderKeySnapshot, ...]:
    """The organization's active keys that can be called: a key whose secret no configured
    encryption key opens, or whose base URL is missing or refused, is left out and logged."""
    usable = []
    for row in ProviderKey.objects.filter(organization_id=organization_id, is_active=True):
        try:
            secret = row.secret()
        except InvalidToken:
            logger.error("Provider key %s cannot be decrypted with GATEWAY_ENCRYPTION_KEYS; skipped", row.id)
            continue
        base_url = row.effective_base_url
        if not base_url or not _usable_address(base_url):
            logger.error("Provider key %s has no usable base URL; skipped", row.id)
            continue
        usable.append(
            ProviderKeySnapshot(
                id=str(row.id),
                provider=row.provider,
                secret=secret,
                weight=float(row.weight),
                data_region=row.data_region,
                base_url=base_url,
                api_version=row.api_version,
                supports_stream_usage=row.supports_stream_usage,
                speaks_responses=row.speaks_responses,
            )
        )
    return tuple(usable)


# --- The console's reads ---------------------------------------------------------------------------


def provider_keys_of(organization_id) -> QuerySet[ProviderKey]:
    """The organization's provider keys, by provider and then newest first (the console lists them)."""
    return ProviderKey.objects.filter(organization_id=organization_id).order_by("provider", "-created_at")
