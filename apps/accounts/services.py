from django.conf import settings
from django.contrib.auth import authenticate
from django.http import HttpRequest
from rest_framework_simplejwt.exceptions import TokenError

from apps.core.errors import AuthenticationFailed, PermissionDenied, RateLimited
from apps.organizations.models import Membership
from apps.sso.policy import password_refusals

from . import login_throttle, two_factor
from .models import User
from .tokens import SessionRefreshToken, check_session


def session_login(
    *, request: HttpRequest, email: str, password: str, organization_id=None, code: str | None = None
) -> dict[str, str]:
    """Checks the credentials (and the two-factor ``code`` when the account has two-factor
    authentication) and issues a session (access + refresh) for one organization.

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
    # Only now, with the right password: an organization's rule that its members use single
    # sign-on (apps/sso/policy.py, with the owners' break-glass), for that organization's sessions
    # only; then the account's second factor.
    refusals = password_refusals(user)
    memberships = Membership.objects.filter(user=user).exclude(organization_id__in=refusals)
    if organization_id is not None:
        if str(organization_id) in refusals:
            raise PermissionDenied(refusals[str(organization_id)], code="sso_required")
        memberships = memberships.filter(organization_id=organization_id)
    elif refusals and not memberships.exists():
        raise PermissionDenied(next(iter(refusals.values())), code="sso_required")
    if two_factor.has_two_factor(user):
        if not code:
            raise AuthenticationFailed(
                "This account has two-factor authentication: send the authenticator app's current code "
                "(or an unused recovery code) as `code`.",
                code="mfa_required",
            )
        if not two_factor.verify_code(user=user, code=code, request=request):
            raise AuthenticationFailed("The two-factor code is incorrect.", code="invalid_mfa_code")
        login_throttle.clear_account(email)

    # Without an organization named: the first one (by membership) whose sessions the password opens.
    membership = memberships.order_by("created_at").first()
    if membership is None:
        raise PermissionDenied(
            "This account is not a member of that organization."
            if organization_id
            else "This account does not belong to any organization yet.",
            code="no_organization",
        )
    refresh = SessionRefreshToken.for_session(user, organization_id=membership.organization_id)
    return {"access": str(refresh.access_token), "refresh": str(refresh)}


def session_issue(*, user: User, organization_id) -> dict[str, str]:
    """A session (access + refresh) for a person already signed in to the console, in one of their
    organizations: how a script gets tokens after single sign-on, where there is no password."""
    if not Membership.objects.filter(user=user, organization_id=organization_id).exists():
        raise PermissionDenied("This account is not a member of that organization.", code="no_organization")
    refresh = SessionRefreshToken.for_session(user, organization_id=organization_id)
    return {"access": str(refresh.access_token), "refresh": str(refresh)}


def session_refresh(*, refresh_token: str) -> dict[str, str]:
    """Rotates a session's pair: the old refresh token is blacklisted, the new one keeps the session's
    start, organization and password digest (apps/accounts/tokens.py)."""
    try:
        refresh = SessionRefreshToken(refresh_token)
    except TokenError as error:
        raise _invalid_refresh_token() from error
    user = User.objects.filter(pk=refresh.get(settings.SIMPLE_JWT["USER_ID_CLAIM"]), is_active=True).first()
    if user is None:
        raise AuthenticationFailed("The session's user no longer exists.", code="token_not_valid")
    check_session(refresh, user)
    access = refresh.access_token
    _, blacklisted_now = refresh.blacklist()
    if not blacklisted_now:  # a concurrent refresh of the same token won the race
        raise _invalid_refresh_token()
    refresh.set_jti()
    refresh.set_exp()
    refresh.set_iat()
    refresh.outstand()
    return {"access": str(access), "refresh": str(refresh)}


def session_logout(*, refresh_token: str) -> None:
    try:
        SessionRefreshToken(refresh_token).blacklist()
    except TokenError as error:
        raise _invalid_refresh_token() from error


def account_credentials_reset(*, user: User) -> None:
    """Takes every way to sign in with the account's credentials away: the password (unusable) and
    two-factor authentication (its authenticators and recovery codes). Every session ends with the
    password: the API's (its digest, apps/accounts/tokens.py) and the console's (Django's session
    hash), at their next request. Single sign-on links (allauth's ``SocialAccount``) stay: each was made
    by a sign-in through a domain its organization proved."""
    from allauth.mfa.models import Authenticator

    user.set_unusable_password()
    user.save(update_fields=["password"])
    Authenticator.objects.filter(user=user).delete()


def _invalid_refresh_token() -> AuthenticationFailed:
    return AuthenticationFailed("The refresh token is invalid or expired.", code="token_not_valid")
