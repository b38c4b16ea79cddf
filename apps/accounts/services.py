import logging
from collections.abc import Mapping

from django.conf import settings
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework_simplejwt.exceptions import TokenError

from apps.core.api.serializers import validated
from apps.core.errors import AuthenticationFailed, InvalidRequest, PermissionDenied, invalid_fields

from . import login_throttle, reclaim
from .inputs import PasswordChangeInputSerializer
from .models import User
from .tokens import SessionRefreshToken, check_session

logger = logging.getLogger(__name__)


def session_refresh(*, refresh_token: str) -> dict[str, str]:
    """Rotates a session's pair: the old refresh token is blacklisted, the new one keeps the session's
    start, organization and password digest (apps/accounts/tokens.py)."""
    try:
        refresh = SessionRefreshToken(refresh_token)  # type: ignore[arg-type]  # simplejwt's hint: a str is what it takes
    except TokenError as error:
        raise _invalid_refresh_token() from error
    user = User.objects.filter(
        pk=refresh.get(str(settings.SIMPLE_JWT["USER_ID_CLAIM"])), is_active=True
    ).first()
    if user is None:
        raise AuthenticationFailed("The session's user no longer exists.", code="token_not_valid")
    check_session(refresh, user)
    access = refresh.access_token
    _, blacklisted_now = refresh.blacklist()  # type: ignore[misc]  # get_or_create's pair, whatever the hint says
    if not blacklisted_now:  # type: ignore[has-type]  # a concurrent refresh of the same token won the race
        raise _invalid_refresh_token()
    refresh.set_jti()
    refresh.set_exp()
    refresh.set_iat()
    refresh.outstand()
    return {"access": str(access), "refresh": str(refresh)}


def session_logout(*, refresh_token: str) -> None:
    try:
        SessionRefreshToken(refresh_token).blacklist()  # type: ignore[arg-type]  # as above
    except TokenError as error:
        raise _invalid_refresh_token() from error


def account_password_change(*, user: User, data: Mapping, client_ip: str) -> None:
    """Changes the account's password, given the current one (``data``: inputs.py
    ``PasswordChangeInputSerializer``); the new one must pass AUTH_PASSWORD_VALIDATORS.

    A wrong current password counts as a failed sign-in of the account and of ``client_ip``
    (login_throttle.py), and the lock-out refuses this as it refuses a sign-in: someone holding a
    signed-in browser or a stolen token does not get more guesses at the password than the login gives.

    Every session that began with the old password ends at its next request: a management session's
    tokens carry a digest of the password (tokens.py), so the refresh and access tokens of every API
    session are refused, the caller's too (the API answers 204 and has no new pair to give), and every
    console session fails Django's session hash. The console keeps the browser that made the change
    signed in (``update_session_auth_hash``, an HTTP session's business, in its view)."""
    if not user.has_usable_password():  # whatever the body says: there is nothing to change
        raise PermissionDenied(
            "This account has no password: it signs in through single sign-on, and its identity provider "
            "manages the password.",
            code="password_not_set",
        )
    values = validated(PasswordChangeInputSerializer, data)
    if login_throttle.locked_out(username=user.email, client_ip=client_ip):
        raise login_throttle.lockout_error()
    if not user.check_password(values["current_password"]):
        login_throttle.record_failure(username=user.email, client_ip=client_ip)
        message = "The current password is incorrect."
        raise InvalidRequest(
            message,
            code="invalid_current_password",
            param="current_password",
            fields={"current_password": [message]},
        )
    try:
        validate_password(values["new_password"], user=user)
    except ValidationError as error:
        raise invalid_fields({"new_password": error.messages}) from None
    user.set_password(values["new_password"])
    user.save(update_fields=["password"])
    logger.info("Account %s changed its password: the sessions begun with the old one end", user.pk)


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


@transaction.atomic
def account_reclaim(*, user: User) -> User:
    """Hands the account to the owner of its address, who has just proved it (single sign-on through a
    domain its organization proved, apps/sso) or whom the operator vouches for (the Django admin's
    action): the account's address becomes verified, its password and two-factor authentication are
    taken away, every session of it ends (``account_credentials_reset``), and it leaves every
    organization and team (what the apps above registered in apps/accounts/reclaim.py).

    What an account made through an invitation link holds was granted to whoever held the links, who
    need not be the address's owner (an owner can invite any address and open the link themselves):
    handing those memberships on would make the owner a member of organizations they never agreed to
    join, and a squatter's memberships would travel with the address. An organization that wants the
    person invites them again. (An organization whose only owner was this account is left without
    one, for the operator: only the squatter can have made it so.)"""
    user = User.objects.select_for_update().get(pk=user.pk)
    account_credentials_reset(user=user)
    for release in reclaim.releases:
        release(user)
    user.email_verified = True
    user.save(update_fields=["email_verified"])
    logger.warning(
        "Account %s reclaimed for the owner of its address: credentials and memberships ended", user.pk
    )
    return user


def _invalid_refresh_token() -> AuthenticationFailed:
    return AuthenticationFailed("The refresh token is invalid or expired.", code="token_not_valid")
