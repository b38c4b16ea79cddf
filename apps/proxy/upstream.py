"""The one upstream HTTP client of this worker: aiohttp, pooled, keep-alive.

aiohttp rather than httpx on the hot path, by measurement (docs/benchmarks.md and the stack notes:
a bare forwarder under Daphne does about 240 requests/s with httpx's default transport and 1,790
with aiohttp). Every connection goes to an address checked by ``CheckedResolver``, so a provider
key's base URL cannot be turned against the gateway's own network by DNS. Every call goes through
``send`` (``post``), which never follows a redirect: a redirect to an IP literal would skip the resolver, and
aiohttp would carry the body and the ``api-key``/``x-api-key`` headers to the new host.
"""

import asyncio
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from django.conf import settings

from apps.providers.addresses import AddressRefused, check_ip

from .runtime import runtime


class RefusedAddressError(OSError):
    """A name resolved to an address the gateway must not call; aiohttp reports it as a
    connection error, so routing fails over as for any unreachable upstream."""


class CheckedResolver(AbstractResolver):
    def __init__(self) -> None:
        self._inner = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            try:
                check_ip(result["host"])
            except AddressRefused as error:
                raise RefusedAddressError(error.message) from None
        return results

    async def close(self) -> None:
        await self._inner.close()


def session() -> aiohttp.ClientSession:
    """This event loop's session (Daphne runs one loop; each test has its own)."""
    loop = asyncio.get_running_loop()
    sessions = runtime.sessions
    client = sessions.get(loop)
    if client is None or client.closed:
        for stale in [known for known in sessions if known.is_closed()]:
            del sessions[stale]
        connector = aiohttp.TCPConnector(
            limit=settings.GATEWAY_UPSTREAM_MAX_CONNECTIONS,
            limit_per_host=0,
            ttl_dns_cache=60,
            keepalive_timeout=30,
            resolver=CheckedResolver(),
        )
        client = sessions[loop] = aiohttp.ClientSession(
            connector=connector,
            # The gateway sends its own headers only; nothing of the client's request leaks upstream.
            skip_auto_headers=("User-Agent",),
            # No cookies kept: the session is shared by every organization and provider key, so a
            # cookie an upstream set for one (a CDN's, say) must never ride along with another's
            # requests. Nor is the jar searched on every request.
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
            # SSE events are read line by line; a line (one event) may be up to twice this.
            read_bufsize=2**20,
        )
    return client


def post(url: str, *, data: bytes, headers: dict[str, str], timeout: aiohttp.ClientTimeout):
    """An upstream POST (use with ``async with`` or ``await``); a 3xx comes back as the answer."""
    return send("POST", url, data=data, headers=headers, timeout=timeout)


def send(method: str, url: str, *, data: bytes, headers: dict[str, str], timeout: aiohttp.ClientTimeout):
    """An upstream request of any method, as ``post``."""
    return session().request(
        method, url, data=data or None, headers=headers, timeout=timeout, allow_redirects=False
    )


async def close_sessions() -> None:
    loop = asyncio.get_running_loop()
    client = runtime.sessions.pop(loop, None)
    if client is not None:
        await client.close()
