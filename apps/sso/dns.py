"""Proving an SSO domain with a DNS TXT record (docs/sso.md, "Proving a domain").

The owner publishes ``_<brand>-challenge.<domain>  TXT  "<brand>-verify=<token>"``; the check asks
the resolvers of ``GATEWAY_SSO_DNS_RESOLVERS`` (the system's when empty) through dnspython, with a
bounded time, for that one name. Only the record's presence counts: a name that does not exist, no
TXT record, or another value is "not found"; a resolver that does not answer in time is
"unavailable", so the owner is told to try again rather than that the record is wrong.
"""

import dns.exception
import dns.name
import dns.nameserver
import dns.resolver
from django.conf import settings


class DnsUnavailable(Exception):
    """No resolver answered (timeout, refused, SERVFAIL)."""


def challenge_name(domain: str) -> str:
    return f"_{settings.GATEWAY_BRAND}-challenge.{domain}"


def challenge_value(token: str) -> str:
    return f"{settings.GATEWAY_BRAND}-verify={token}"


def _resolver() -> dns.resolver.Resolver:
    if not settings.GATEWAY_SSO_DNS_RESOLVERS:
        resolver = dns.resolver.Resolver()
    else:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [
            dns.nameserver.Do53Nameserver(address, port)
            for address, port in settings.GATEWAY_SSO_DNS_RESOLVERS
        ]
    resolver.lifetime = resolver.timeout = settings.GATEWAY_SSO_DNS_TIMEOUT_SECONDS
    resolver.cache = None  # a record just published is looked for now, not a remembered "no"
    return resolver


def txt_record_present(*, domain: str, token: str) -> bool:
    """Whether the challenge name of ``domain`` has a TXT record whose value is exactly
    ``<brand>-verify=<token>`` (a long value split in several strings is joined, as RFC 7208 does)."""
    expected = challenge_value(token).encode()
    try:
        answer = _resolver().resolve(dns.name.from_text(challenge_name(domain)), "TXT", search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return False
    except (dns.resolver.NoNameservers, dns.exception.Timeout) as error:
        raise DnsUnavailable(type(error).__name__) from None
    except dns.exception.DNSException as error:  # a malformed name or answer
        raise DnsUnavailable(type(error).__name__) from None
    return any(b"".join(record.strings) == expected for record in answer)
