"""Which upstream addresses the gateway may call.

A provider key's base URL is chosen by an organization admin, so without a check the gateway
could be pointed at its own network (server-side request forgery). Link-local addresses, which
include the cloud metadata service at 169.254.169.254, are always refused; private, loopback and
other non-public addresses only when ``GATEWAY_ALLOW_PRIVATE_UPSTREAMS`` is set (self-hosted
models on a private network, and the tests). The same check runs again on every connection, on
the address actually resolved (apps/proxy/upstream.py), so DNS cannot be used to get around it.
"""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

from apps.core.errors import InvalidRequest

# Cloud metadata endpoints outside 169.254.0.0/16 (AWS IPv6, Alibaba).
_METADATA = {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}


class AddressRefused(InvalidRequest):
    code = "upstream_address_refused"


def check_ip(address: str) -> None:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_link_local or ip in _METADATA:
        raise AddressRefused(
            f"The upstream address {ip} is link-local or a metadata service; it is never allowed."
        )
    if not ip.is_global and not settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS:
        raise AddressRefused(
            f"The upstream address {ip} is private or local; set GATEWAY_ALLOW_PRIVATE_UPSTREAMS=true "
            "to allow self-hosted upstreams."
        )


def check_upstream_url(url: str) -> str:
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
    for info in infos:
        check_ip(info[4][0])
    return url.rstrip("/")
