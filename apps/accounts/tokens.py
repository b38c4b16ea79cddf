"""Management session tokens: simplejwt's pair, bound to the sign-in that started the session.

A session starts at sign-in (``auth_time``) and carries a keyed digest of the account's password hash
(``pwd``); refreshing rotates the pair and keeps both claims. So:

- a password change, by any path (the admin console, ``set_password``), ends every session of the
  account at once: the digest no longer matches, on refresh and on every request;
- no chain of refreshes outlives ``GATEWAY_SESSION_MAX_AGE_DAYS`` from the sign-in: every token's ``exp``
  is capped at the session's end, and the age is checked again in case the setting was lowered.

The digest is an HMAC keyed with ``SECRET_KEY``: the token, which anyone holding it can read, carries
nothing that helps to guess the password offline (simplejwt's own ``CHECK_REVOKE_TOKEN`` puts a plain
MD5 of the hash in the token, and does not check it on refresh).
"""

from django.conf import settings
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac
from rest_framework_simplejwt.tokens import RefreshToken, Token

from apps.core.errors import AuthenticationFailed

ORGANIZATION_CLAIM = "org_id"
AUTH_TIME_CLAIM = "auth_time"
PASSWORD_CLAIM = "pwd"


def password_digest(user) -> str:
    return salted_hmac("apps.accounts.tokens.password", user.password, algorithm="sha256").hexdigest()[:32]


def _session_end(token: Token) -> int | None:
    auth_time = token.get(AUTH_TIME_CLAIM)
    if auth_time is None:
        return None
    return int(auth_time) + settings.GATEWAY_SESSION_MAX_AGE_DAYS * 86_400


def _cap_expiry(token: Token) -> None:
    end = _session_end(token)
    if end is not None and token["exp"] > end:
        token["exp"] = end


class SessionRefreshToken(RefreshToken):
    @classmethod
    def for_session(cls, user, *, organization_id) -> "SessionRefreshToken":
        token = cls()
        token[settings.SIMPLE_JWT["USER_ID_CLAIM"]] = str(user.pk)
        token[ORGANIZATION_CLAIM] = str(organization_id)
        token[AUTH_TIME_CLAIM] = int(token.current_time.timestamp())
        token[PASSWORD_CLAIM] = password_digest(user)
        token.set_exp()
        token.outstand()  # listed, so flushexpiredtokens and the blacklist know it
        return token

    def set_exp(self, claim: str = "exp", from_time=None, lifetime=None) -> None:
        super().set_exp(claim, from_time, lifetime)
        if claim == "exp":
            _cap_expiry(self)

    @property
    def access_token(self):
        access = super().access_token  # copies auth_time and pwd
        _cap_expiry(access)
        return access


def check_session(token: Token, user) -> None:
    """Refuses a token whose session has ended: the password changed since the sign-in, or the
    session is older than its maximum age (or predates these claims)."""
    digest, end = token.get(PASSWORD_CLAIM), _session_end(token)
    if digest is None or end is None:
        raise AuthenticationFailed(
            "This session was started by an older version of the gateway; sign in again.",
            code="token_not_valid",
        )
    if not constant_time_compare(str(digest), password_digest(user)):
        raise AuthenticationFailed(
            "The account's password was changed after this session began; sign in again.",
            code="password_changed",
        )
    if timezone.now().timestamp() >= end:
        raise AuthenticationFailed(
            "This session has reached its maximum age; sign in again.", code="session_expired"
        )
