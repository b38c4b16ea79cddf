"""Signing a member in to one of their organizations: a management session (simplejwt's pair,
apps/accounts/tokens.py) is always a session in one organization, the one its token names
(apps/organizations/authentication.py). The password, two-factor and throttling checks are the
accounts' (apps/accounts); which organizations a session may open is tenancy's, so it lives here.
"""

from django.contrib.auth import authenticate
from django.http import HttpRequest

from apps.accounts import login_throttle, two_factor
from apps.accounts.models import User
from apps.accounts.password_rules import password_refusals
from apps.accounts.tokens import SessionRefreshToken
from apps.core.errors import AuthenticationFailed, PermissionDenied

from .models import Membership


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
        raise login_throttle.lockout_error()
    user = authenticate(request, username=email, password=password)
    if user is None:
        raise AuthenticationFailed("Email or password is incorrect.", code="invalid_credentials")
    # Only now, with the right password: an organization's rule that its members use single
    # sign-on (apps/sso/policy.py, with the owners' break-glass, through apps/accounts/password_rules.py),
    # for that organization's sessions only; then the account's second factor.
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
