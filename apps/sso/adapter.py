"""django-allauth's social accounts, adapted to the organizations' SSO connections (docs/sso.md).

The apps are the active connections, built when a request needs them: nothing is copied into
allauth's ``SocialApp`` table, and the client secret stays encrypted in the connection
(apps/sso/oidc.py decrypts it for the token endpoint only). After the identity provider has
answered and its id_token passed the checks (signature, issuer, audience, expiry, nonce), the
sign-in is accepted here only when:

- the connection is still active and its organization on a paid plan;
- the identity provider says the email is verified (``email_verified`` true);
- the email's domain is one of the connection's ``allowed_domains``, and the organization has proved
  it owns that domain (``SsoDomain``: a DNS TXT record, or an operator's approval).

Otherwise a page says why, and no user, link or membership is made. When it is accepted, the person
gets an account (unusable password) if they had none, and a membership in the connection's
organization with its ``default_role`` if they had none there (just in time).
"""

import logging
import uuid

from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.http import HttpRequest
from django.shortcuts import render

from apps.accounts.adapter import SSO_ORGANIZATION_STATE
from apps.organizations.models import Plan

from . import addresses, saml, services
from .errors import SignInRefused
from .models import Protocol, SsoConnection
from .oidc import PROVIDER
from .policy import email_domain
from .selectors import domain_proved_by

logger = logging.getLogger(__name__)


def social_app(connection: SsoConnection) -> SocialApp:
    """The allauth app of a connection; never saved, and without the secret."""
    if connection.protocol == Protocol.SAML:
        return saml.social_app(connection)
    return SocialApp(
        provider=PROVIDER,
        provider_id=str(connection.id),
        name=connection.name,
        client_id=connection.client_id,
        secret="",
        settings={"server_url": connection.issuer},
    )


def refused(request: HttpRequest, message: str, *, status: int = 403) -> ImmediateHttpResponse:
    return ImmediateHttpResponse(
        render(request, "socialaccount/refused.html", {"message": message}, status=status)
    )


def _claims(sociallogin) -> dict:
    data = sociallogin.account.extra_data or {}
    return data.get("userinfo") or data.get("id_token") or data.get("claims") or {}


class SsoAccountAdapter(DefaultSocialAccountAdapter):
    def list_apps(self, request: HttpRequest, provider=None, client_id=None) -> list[SocialApp]:
        connections = SsoConnection.objects.filter(is_active=True)
        if provider == saml.SAML_PROVIDER:
            # allauth's SAML views look the app up by its client_id: the connection's id.
            connections = connections.filter(protocol=Protocol.SAML)
            if client_id:
                try:
                    connections = connections.filter(pk=uuid.UUID(str(client_id)))
                except ValueError:
                    return []
            return [social_app(connection) for connection in connections]
        if provider == PROVIDER:
            connections = connections.filter(protocol=Protocol.OIDC)
        elif provider:
            try:
                connections = connections.filter(pk=uuid.UUID(str(provider)))
            except ValueError:
                return []
        if client_id:
            connections = connections.filter(client_id=client_id)
        return [social_app(connection) for connection in connections]

    def get_requests_session(self):
        # Every request allauth makes for a connection (discovery, token, JWKS, userinfo) comes here:
        # https only, to checked and pinned addresses (apps/sso/addresses.py).
        session = addresses.pin(super().get_requests_session())
        if settings.GATEWAY_SSO_CA_BUNDLE:
            # The session's own: the pinned session reads no CA bundle from the environment.
            session.verify = settings.GATEWAY_SSO_CA_BUNDLE
        return session

    def is_open_for_signup(self, request: HttpRequest, sociallogin) -> bool:
        # pre_social_login has made the account (or refused the sign-in) by the time this is asked.
        return True

    def pre_social_login(self, request: HttpRequest, sociallogin) -> None:
        connection = (
            SsoConnection.objects.select_related("organization")
            .filter(pk=sociallogin.provider.app.provider_id, is_active=True)
            .first()
        )
        if connection is None:
            raise refused(request, "This single sign-on connection is no longer active.")
        if connection.organization.plan == Plan.FREE:
            raise refused(request, services.PLAN_MESSAGE)
        claims = _claims(sociallogin)
        email = claims.get("email")
        try:
            validate_email(email)
        except ValidationError:
            raise refused(request, "Your identity provider sent no valid email address.") from None
        if claims.get("email_verified") not in (True, "true"):
            raise refused(
                request,
                f"Your identity provider has not verified {email}; it cannot be used to sign in here.",
            )
        if email_domain(email) not in connection.allowed_domains:
            raise refused(
                request,
                f"{email_domain(email)} is not one of the email domains {connection.organization.name} "
                "signs in with through this connection.",
            )
        if not domain_proved_by(organization_id=connection.organization_id, domain=email_domain(email)):
            # An unproved domain signs no one in: its claim could be anyone's (docs/sso.md).
            raise refused(
                request,
                f"{connection.organization.name} has not proved that it owns {email_domain(email)} yet; "
                "an owner verifies the domain before it signs anyone in.",
            )
        try:
            membership = services.sso_member_sign_in(connection=connection, email=email)
        except SignInRefused as error:
            raise refused(request, error.message) from None
        if sociallogin.is_existing:
            if sociallogin.user.pk != membership.user_id:
                raise refused(
                    request,
                    "This identity-provider account is linked to another account of the gateway.",
                )
        else:
            sociallogin.connect(request, membership.user)
        sociallogin.state[SSO_ORGANIZATION_STATE] = str(connection.organization_id)

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None):
        # Never the exception's text alone: it can quote what the identity provider sent.
        logger.warning(
            "Single sign-on failed for connection %s: %s %s",
            getattr(getattr(provider, "app", None), "provider_id", "?"),
            error,
            type(exception).__name__ if exception else "",
        )
