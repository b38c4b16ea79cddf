"""Session-token authentication for the management API: a session is a member's, in one organization.

A session is a simplejwt access token that also names the organization the user signed in to
(``org_id``); a session ended by a password change or its maximum age is refused
(apps/accounts/tokens.py). API keys are for the proxy only and are refused here with a message that
says so. It lives with tenancy, not with the accounts: what it answers is the caller's membership.
"""

from dataclasses import dataclass

from django.conf import settings
from rest_framework import exceptions
from rest_framework_simplejwt.authentication import JWTAuthentication
from rest_framework_simplejwt.tokens import Token

from apps.accounts.tokens import ORGANIZATION_CLAIM, check_session

from .models import Membership, Organization


@dataclass(frozen=True)
class SessionContext:
    token: Token
    organization: Organization
    membership: Membership


class SessionTokenAuthentication(JWTAuthentication):
    www_authenticate_realm = "management"

    def get_raw_token(self, header: bytes) -> bytes:
        parts = header.split()
        if (
            len(parts) != 2
            or parts[0].decode(errors="replace") not in settings.SIMPLE_JWT["AUTH_HEADER_TYPES"]
        ):
            raise exceptions.AuthenticationFailed(
                "The Authorization header must be 'Bearer <access token>'.", code="malformed_authorization"
            )
        return parts[1]

    def authenticate(self, request):
        header = self.get_header(request)
        if header is None:
            return None
        raw_token = self.get_raw_token(header)
        if raw_token.startswith(b"sk_") or raw_token.startswith(settings.GATEWAY_API_KEY_PREFIX.encode()):
            raise exceptions.AuthenticationFailed(
                "API keys authenticate the proxy (/v1/) only. Sign in with POST /api/v1/auth/login and "
                "send the access token it returns.",
                code="api_key_not_accepted",
            )
        token = self.get_validated_token(raw_token)
        user = self.get_user(token)
        check_session(token, user)
        membership = (
            Membership.objects.select_related("organization")
            .filter(user=user, organization_id=token.get(ORGANIZATION_CLAIM))
            .first()
        )
        if membership is None:
            raise exceptions.AuthenticationFailed(
                "This session's organization membership no longer exists; sign in again.",
                code="membership_not_found",
            )
        return user, SessionContext(token=token, organization=membership.organization, membership=membership)


# The OpenAPI description of this class, for drf-spectacular: registered where the class loads (the
# management API), not at start-up, where a server process that only proxies would load DRF's schema.
from . import schema  # noqa: E402, F401
