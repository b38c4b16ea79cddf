from django.conf import settings
from django.contrib.auth import authenticate
from django.http import HttpRequest
from rest_framework_simplejwt.exceptions import TokenError
from rest_framework_simplejwt.tokens import RefreshToken

from apps.core.errors import AuthenticationFailed, PermissionDenied, RateLimited
from apps.organizations.models import Membership

from . import login_throttle
from .authentication import ORGANIZATION_CLAIM


def session_login(*, request: HttpRequest, email: str, password: str, organization_id=None) -> dict[str, str]:
    """Checks the credentials and issues a session (access + refresh) for one organization.

    Failures are counted (and a lock-out enforced) by apps/accounts/login_throttle.py, the same way as
    on the admin console's login page; asking first is what lets this path answer 429.
    """
    email = email.strip().lower()
    if login_throttle.locked_out(username=email, client_ip=login_throttle.client_address(request)):
        raise RateLimited(
            "Too many failed sign-in attempts; try again later.",
            code="too_many_login_attempts",
            headers={"Retry-After": str(settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS)},
        )
    user = authenticate(request, username=email, password=password)
    if user is None:
        raise AuthenticationFailed("Email or password is incorrect.", code="invalid_credentials")

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
