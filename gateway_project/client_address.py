"""The client's address behind a reverse proxy.

``X-Forwarded-For`` is something any client can write, so it is believed only when the direct peer is
one of the proxies named in ``GATEWAY_TRUSTED_PROXIES``. Then the header is read from the right (each
proxy appends the address it saw) and the right-most address that is not one of our proxies is the
client: everything left of it was written by that client or by proxies we know nothing about.

The wrapper rewrites ``scope["client"]`` once, in front of both the proxy and Django, so the audit log,
the exports and the login limiter all see the same address. With no trusted proxies (the default) the
application is served unwrapped and the lean ``/v1/`` path pays nothing.
"""

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_trusted_proxies(entries: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or CIDR networks, validated at start-up; a typo must not silently trust nobody (or
    everybody), so host bits set in a network (``10.0.0.1/8``) are refused too."""
    networks = []
    for entry in (entry.strip() for entry in entries):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError as error:
            raise ImproperlyConfigured(
                f"GATEWAY_TRUSTED_PROXIES: {entry!r} is not an IP address or CIDR network ({error})"
            ) from error
    return tuple(networks)


def parse_address(text: str) -> Address | None:
    """One X-Forwarded-For entry: a bare address, or with a port as some balancers write it
    (``203.0.113.9:4711``, ``[2001:db8::9]:4711``). IPv4-mapped IPv6 counts as the IPv4 address."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else ""
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def trust_forwarded_for(app, trusted: tuple[Network, ...]):
    """``app`` with ``scope["client"]`` taken from X-Forwarded-For when the peer is a trusted proxy."""
    if not trusted:
        return app

    # A deployment has a handful of proxies and clients repeat: the membership test is memoised.
    @lru_cache(maxsize=4096)
    def is_trusted(host: str) -> bool:
        address = parse_address(host)
        return address is not None and any(address in network for network in trusted)

    def client_from(hops: list[str]) -> str | None:
        chosen = None
        for hop in reversed(hops):
            address = parse_address(hop)
            if address is None:
                break  # junk where an address should be: nothing at or left of it can be believed
            chosen = str(address)
            if not is_trusted(chosen):
                break
        return chosen

    async def forwarded_client_app(scope, receive, send):
        client = scope.get("client")
        if client and is_trusted(client[0]):
            hops = [
                hop
                for name, value in scope["headers"]
                if name == b"x-forwarded-for"
                for hop in value.decode("latin-1").split(",")
            ]
            address = client_from(hops) if hops else None
            if address is not None:
                scope = {**scope, "client": (address, 0)}  # the client's own port is not forwarded
        await app(scope, receive, send)

    return forwarded_client_app
