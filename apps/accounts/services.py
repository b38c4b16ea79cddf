import hashlib

from django.conf import settings
from django.contrib.auth import authenticate
from django.core.cache import cache
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.tokens import RefreshToken

from apps.core.errors import AuthenticationFailed, PermissionDenied, RateLimited
from apps.organizations.models import Membership

from .authentication import ORGANIZATION_CLAIM


def _failure_keys(email: str, client_ip: str) -> list[tuple[str, int]]:
    """Failed sign-ins are counted per account and per client address; an address gets more room
    because many people can share one."""
    limit = settings.GATEWAY_LOGIN_FAILURE_LIMIT
    email_digest = hashlib.sha256(email.strip().lower().encode()).hexdigest()[:32]
    return [(f"login-failures:email:{email_digest}", limit), (f"login-failures:ip:{client_ip}", limit * 4)]


def _refuse_if_throttled(keys: list[tuple[str, int]]) -> None:
    counts = cache.get_many([key for key, _ in keys])
    if any(counts.get(key, 0) >= limit for key, limit in keys):
        window = settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS
        raise RateLimited(
            "Too many failed sign-in attempts; try again later.",
            code="too_many_login_attempts",
            headers={"Retry-After": str(window)},
        )


def _record_failure(keys: list[tuple[str, int]]) -> None:
    window = settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS
    for key, _ in keys:
        cache.add(key, 0, timeout=window)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=window)


def session_login(*, email: str, password: str, client_ip: str, organization_id=None) -> dict[str, str]:
    """Checks the credentials and issues a session (access + refresh) for one organization."""
    keys = _failure_keys(email, client_ip)
    _refuse_if_throttled(keys)
    user = authenticate(username=email.strip().lower(), password=password)
    if user is None:
        _record_failure(keys)
        raise AuthenticationFailed("Email or password is incorrect.", code="invalid_credentials")
    cache.delete(keys[0][0])

    memberships = Membership.objects.filter(user=user).order_by("created_at")
    if organization_id is not None:
        memberships = memberships.filter(organization_id=organization_id)
    membership = memberships.first()
    if membership is None:
        raise PermissionDenied(
            "This account is not a member of that organization."
            if organization_id
            else "This account does not belong to any organization yet.",
            code="no_organization",
        )
    refresh = RefreshToken.for_user(user)
    refresh[ORGANIZATION_CLAIM] = str(membership.organization_id)
    return {"access": str(refresh.access_token), "refresh": str(refresh)}


def session_logout(*, refresh_token: str) -> None:
    try:
        RefreshToken(refresh_token).blacklist()
    except TokenError as error:
        raise AuthenticationFailed(
            "The refresh token is invalid or expired.", code="token_not_valid"
        ) from error
