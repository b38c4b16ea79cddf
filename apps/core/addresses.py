"""Which network addresses the gateway may connect to when a customer chose the target.

Upstream base URLs (apps/providers/addresses.py), webhook URLs (apps/webhooks/addresses.py) and
single sign-on identity providers (apps/sso/addresses.py) are chosen by an organization's admins, so
without a check the gateway could be pointed at its own network (server-side request forgery).
Link-local addresses, which include the cloud metadata service at 169.254.169.254, are always
refused; private, loopback and other non-public addresses only when the target's own setting allows
them (``GATEWAY_ALLOW_PRIVATE_UPSTREAMS``, ``_WEBHOOKS``, ``_SSO``). Each caller checks again on the
address actually resolved when it connects, so DNS cannot be used to get around it.

An IPv6 address can carry an IPv4 address that a translator or tunnel on the way delivers to: NAT64
(``64:ff9b::a9fe:a9fe``), 6to4 (``2002:a9fe:a9fe::``), Teredo, and the IPv4-compatible, -mapped and
-translated forms (``::127.0.0.1``, ``::ffff:…``). The IPv4 address inside is checked as well. The
local-use NAT64 prefix ``64:ff9b:1::/48`` (RFC 8215) is refused outright: a /48 prefix may put the
IPv4 address in any of RFC 6052's positions (``64:ff9b:1:a9fe:a9:fe00::`` is 169.254.169.254), and a
translator of the operator's own network is no place for a provider's API.
"""

import ipaddress
import socket

from django.conf import settings

from apps.core.errors import InvalidRequest

# Cloud metadata endpoints outside 169.254.0.0/16 (AWS IPv6, Alibaba).
_METADATA = {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}
# Prefixes whose last 32 bits are an IPv4 address: NAT64's well-known prefix (RFC 6052),
# IPv4-compatible (deprecated, but still routed by some stacks) and IPv4-translated (RFC 2765).
_IPV4_IN_LAST_32_BITS = tuple(
    ipaddress.ip_network(prefix) for prefix in ("64:ff9b::/96", "::/96", "::ffff:0:0:0/96")
)
_LOCAL_USE_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# What each allowance is for, as its refusal says.
_ALLOWED_BY = {
    "GATEWAY_ALLOW_PRIVATE_UPSTREAMS": "self-hosted upstreams",
    "GATEWAY_ALLOW_PRIVATE_WEBHOOKS": "webhooks on a private network",
    "GATEWAY_ALLOW_PRIVATE_SSO": "identity providers on a private network",
}


class AddressRefused(InvalidRequest):
    """An address the gateway must not connect to; each kind of target has its own subclass and code."""

    code = "address_refused"


def check_ip(
    address: str, *, allowance: str, subject: str, refused: type[AddressRefused] = AddressRefused
) -> None:
    """Raises ``refused`` for an address the gateway must not call; ValueError if ``address`` is
    not an IP address at all (a host name). ``allowance`` names the boolean setting that allows
    private and loopback addresses; ``subject`` is what the messages call the address."""
    ip = ipaddress.ip_address(address)
    if ip in _LOCAL_USE_NAT64:
        raise refused(
            f"The {subject} {ip} is in the local-use NAT64 prefix {_LOCAL_USE_NAT64}, which can "
            "carry any IPv4 address (the metadata service too); it is never allowed."
        )
    judged = _judged_addresses(ip)
    for candidate in judged:
        if candidate.is_link_local or candidate in _METADATA:
            raise refused(
                f"The {subject} {_named(candidate, ip)} is link-local or a metadata service; "
                "it is never allowed."
            )
    if getattr(settings, allowance):
        return
    for candidate in judged:
        if not candidate.is_global:
            raise refused(
                f"The {subject} {_named(candidate, ip)} is private or local; set "
                f"{allowance}=true to allow {_ALLOWED_BY.get(allowance, 'them')}."
            )


def ip_literal(host: str) -> IPAddress | None:
    """The address a URL's host names without a DNS look-up, or None for a host name.

    Besides the usual forms, the C resolver takes IPv4 addresses spelled the old ways (``127.1``,
    ``2130706433``, ``0x7f.0.0.1``, ``0177.0.0.1``): ``getaddrinfo`` turns them into addresses
    without asking DNS, so they are addresses here too."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):  # not an address; ValueError for an embedded NUL
        return None


def _judged_addresses(ip: IPAddress) -> list[IPAddress]:
    """The address itself and every IPv4 address it reaches through a translator or tunnel."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]  # only a spelling of the IPv4 address (and never global itself)
    judged: list[IPAddress] = [ip]
    if ip.sixtofour is not None:
        judged.append(ip.sixtofour)
    if ip.teredo is not None:
        judged.extend(ip.teredo)  # the server and the client
    if any(ip in prefix for prefix in _IPV4_IN_LAST_32_BITS):
        judged.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return judged


def _named(address: IPAddress, given: IPAddress) -> str:
    return str(address) if address == given else f"{address} (inside {given})"
