"""Which upstream addresses the gateway may call.

A provider key's base URL is chosen by an organization admin, so without a check the gateway
could be pointed at its own network (server-side request forgery). The rule (apps/core/addresses.py)
always refuses link-local and metadata addresses, and private, loopback and other non-public ones
unless ``GATEWAY_ALLOW_PRIVATE_UPSTREAMS`` is set (self-hosted models on a private network, and the
tests). The same check runs again on every connection, on the address actually resolved
(apps/proxy/upstream.py; upstream_check.py for the console's test of a key), so DNS cannot be used to
get around it.
"""

import socket
from urllib.parse import urlsplit

from apps.core import addresses


class AddressRefused(addresses.AddressRefused):
    code = "upstream_address_refused"


def check_ip(
    address: str, *, allowance: str = "GATEWAY_ALLOW_PRIVATE_UPSTREAMS", subject: str = "upstream address"
) -> None:
    """Raises AddressRefused for an address the gateway must not call as an upstream; ValueError if
    ``address`` is not an IP address at all (a host name)."""
    addresses.check_ip(address, allowance=allowance, subject=subject, refused=AddressRefused)


def check_upstream_url(url: str) -> str:
    checked_addresses(url)
    return url.rstrip("/")


def checked_addresses(url: str) -> list[str]:
    """Every address the host of ``url`` resolves to, each one checked: where a connection to it may
    go. Raises AddressRefused (naming ``base_url``) for a URL of the wrong form, a host that does not
    resolve, or any address the gateway must not call."""
    try:
        parts = urlsplit(url)
        port = parts.port  # parsed lazily: an out-of-range or non-numeric port raises here
    except ValueError as error:
        # urllib's message quotes part of the URL; the answer never echoes what may be a secret.
        raise AddressRefused(
            "The base URL is not a valid URL (check its port and any IPv6 address).", param="base_url"
        ) from error
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("The base URL must be an http(s) URL with a host.", param="base_url")
    if parts.username or parts.password:
        raise AddressRefused("The base URL must not carry credentials; use the key field.", param="base_url")
    if parts.query or parts.fragment:
        raise AddressRefused("The base URL must not have a query or fragment.", param="base_url")
    try:
        infos = socket.getaddrinfo(parts.hostname, port or 443, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as error:
        raise AddressRefused(f"The host {parts.hostname} could not be resolved.", param="base_url") from error
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        check_ip(address)
    return addresses
