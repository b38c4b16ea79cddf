"""Which webhook URLs the gateway sends to (decisions.md, "Events and webhooks").

HTTPS only, with a host and no credentials or fragment. The host's addresses follow the gateway's
rule (apps/core/addresses.py): link-local and metadata addresses (169.254.0.0/16, fe80::/10 ...)
always refused, private and loopback ones unless ``GATEWAY_ALLOW_PRIVATE_WEBHOOKS``. The rule is
checked when a webhook is saved, and again on every delivery on the address actually resolved,
which is the address the delivery then connects to (apps/webhooks/transport.py).
"""

import socket
from dataclasses import dataclass

import httpx

from apps.core.addresses import AddressRefused, check_ip

ALLOWANCE = "GATEWAY_ALLOW_PRIVATE_WEBHOOKS"
URL_LENGTH = 2000


class WebhookAddressRefused(AddressRefused):
    code = "webhook_address_refused"


class WebhookHostUnresolved(WebhookAddressRefused):
    """The host has no address: refused like a refused address (the same code), but a delivery
    reports it apart ("host not found", apps/webhooks/transport.py)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a delivery goes: the URL as the webhook has it, and the one checked address to connect to."""

    url: httpx.URL
    address: str


def parse_url(url: str) -> httpx.URL:
    """The URL if its form is allowed; WebhookAddressRefused otherwise (no DNS look-up)."""
    if not isinstance(url, str) or not url or len(url) > URL_LENGTH:
        raise WebhookAddressRefused(f"The URL must be a string of 1 to {URL_LENGTH} characters.")
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 (httpx decodes an international host only when it is read)
    except (httpx.InvalidURL, ValueError, TypeError):  # UnicodeError (a bad xn-- label) is a ValueError
        parsed = None
    if parsed is None or (parsed.port is not None and not 0 < parsed.port < 65536):
        # The message never echoes the URL: it may carry a token.
        raise WebhookAddressRefused("The URL is not a valid URL (check its host and port).")
    if parsed.scheme != "https" or not parsed.host:
        raise WebhookAddressRefused("The URL must be an https:// URL with a host.")
    if parsed.userinfo:
        raise WebhookAddressRefused("The URL must not carry credentials.")
    if parsed.fragment:
        raise WebhookAddressRefused("The URL must not have a fragment.")
    return parsed


def resolve(url: str) -> Target:
    """Parses ``url``, resolves its host and checks every address it resolves to; the target is
    the first of them. Raises WebhookAddressRefused."""
    parsed = parse_url(url)
    try:
        infos = socket.getaddrinfo(parsed.host, parsed.port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, OSError):
        raise WebhookHostUnresolved(f"The host {parsed.host} could not be resolved.") from None
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise WebhookHostUnresolved(f"The host {parsed.host} could not be resolved.")
    for address in addresses:
        check_ip(address, allowance=ALLOWANCE, subject="webhook address", refused=WebhookAddressRefused)
    return Target(url=parsed, address=addresses[0])


def check_webhook_url(url: str) -> str:
    """The URL as given if it may be a webhook's now; WebhookAddressRefused otherwise."""
    resolve(url)
    return url
