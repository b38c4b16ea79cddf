"""Failed sign-ins, counted once for every sign-in path (the management API's login, the admin console).

Failures are counted by Django's ``user_login_failed`` signal, which every ``authenticate()`` sends, so
a new sign-in path is counted without doing anything; a wrong current password given to change the
password is counted too (``account_password_change``, services.py), or a stolen session would be a way
to guess the password past the limit. They are counted per account and per client address (an address
gets more room because many people can share one; an IPv6 address counts by its /64, which one
subscriber gets whole), for ``GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS`` from the first failure. Once
either count reaches its limit, ``ThrottledModelBackend`` refuses every attempt, even with the right
password, until the window passes; the login paths ask ``locked_out`` first so they can say why.
"""

import hashlib
import ipaddress

from allauth.mfa.signals import authentication_failed as mfa_authentication_failed
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest

from apps.core.errors import RateLimited


def client_address(request: HttpRequest | None) -> str:
    """The address gateway_project/client_address.py settled on (the peer, or the right-most untrusted
    X-Forwarded-For hop behind a trusted proxy)."""
    return request.META.get("REMOTE_ADDR", "") if request is not None else ""


def _account_key(username: str) -> str:
    digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    return f"login-failures:email:{digest}"


def _address_key(client_ip: str) -> str:
    """An IPv4 address as it is; an IPv6 address as its /64: a network hands a subscriber a whole /64,
    so counting single addresses would give one attacker 2**64 fresh counters."""
    try:
        address = ipaddress.ip_address(client_ip)
    except ValueError:
        return f"login-failures:ip:{client_ip}"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return f"login-failures:ip:{address.ipv4_mapped}"
        return f"login-failures:ip:{ipaddress.IPv6Network((int(address) >> 64 << 64, 64))}"
    return f"login-failures:ip:{address}"


def _keys(username: str, client_ip: str) -> list[tuple[str, int]]:
    limit = settings.GATEWAY_LOGIN_FAILURE_LIMIT
    keys = [(_account_key(username), limit)]
    if client_ip:  # without a request (a shell, a script) there is no address to hold to account
        keys.append((_address_key(client_ip), limit * 4))
    return keys


def locked_out(*, username: str, client_ip: str) -> bool:
    keys = _keys(username, client_ip)
    counts = cache.get_many([key for key, _ in keys])
    return any(counts.get(key, 0) >= limit for key, limit in keys)


def lockout_error() -> RateLimited:
    """What a path that asked ``locked_out`` answers (429, with when to try again)."""
    return RateLimited(
        "Too many failed sign-in attempts; try again later.",
        code="too_many_login_attempts",
        headers={"Retry-After": str(settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS)},
    )


def record_failure(*, username: str, client_ip: str) -> None:
    window = settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS
    for key, _ in _keys(username, client_ip):
        cache.add(key, 0, timeout=window)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=window)


def _username(credentials: dict) -> str:
    return str(credentials.get("username") or credentials.get(get_user_model().USERNAME_FIELD) or "")


def clear_account(username: str) -> None:
    """A complete sign-in (with its second factor, if the account has one) clears the account's count."""
    cache.delete(_account_key(username))


@receiver(user_login_failed, dispatch_uid="apps.accounts.login_throttle.count_failure")
def count_failure(sender, credentials: dict, request: HttpRequest | None = None, **kwargs) -> None:
    record_failure(username=_username(credentials), client_ip=client_address(request))


@receiver(mfa_authentication_failed, dispatch_uid="apps.accounts.login_throttle.count_mfa_failure")
def count_mfa_failure(sender, request: HttpRequest | None = None, user=None, **kwargs) -> None:
    """A wrong two-factor code on the console is a failed sign-in too."""
    if user is not None:
        record_failure(username=user.email, client_ip=client_address(request))


@receiver(user_logged_in, dispatch_uid="apps.accounts.login_throttle.clear_on_login")
def clear_on_login(sender, request: HttpRequest | None = None, user=None, **kwargs) -> None:
    if user is not None:
        clear_account(user.get_username())


class ThrottledModelBackend(ModelBackend):
    """Django's model backend behind the failure counters: a locked-out account or address is refused
    before its password is checked, and a success clears the account's count."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        username = username or kwargs.get(get_user_model().USERNAME_FIELD) or ""
        if locked_out(username=username, client_ip=client_address(request)):
            raise PermissionDenied  # authenticate() stops here and reports a failed sign-in
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and not _has_two_factor(user):
            # With a second factor the count stays until the code is right too (clear_on_login, or
            # the API's login), so a known password cannot reset it between guessed codes.
            clear_account(username)
        return user


def _has_two_factor(user) -> bool:
    from .two_factor import has_two_factor

    return has_two_factor(user)
