"""Starting a single sign-on: which connection, and the identity provider's authorization URL.

Used by ``POST /api/v1/auth/sso/initiate`` (the state kept on the server, apps/sso/state.py) and by
the console's "Sign in with SSO" button (the state kept in the browser's session, as allauth does).
"""

import uuid

from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from django.http import HttpRequest
from onelogin.saml2.errors import OneLogin_Saml2_Error
from requests import RequestException

from apps.core.errors import InvalidRequest, NotFound, ServiceUnavailable
from apps.organizations.models import Organization, Plan

from .addresses import RefusedEndpoint
from .errors import PlanRequired
from .models import SsoConnection
from .policy import email_domain
from .selectors import active_connection_for_domain
from .services import PLAN_MESSAGE


class ConnectionNotFound(NotFound):
    code = "sso_connection_not_found"


class ProviderUnavailable(ServiceUnavailable):
    code = "sso_provider_unavailable"


NOT_FOUND_FOR_EMAIL = "No single sign-on connection signs in this email's domain."
NOT_FOUND_FOR_ORGANIZATION = "No such organization, or it has no active single sign-on connection."


def connection_for_email(email: str) -> SsoConnection:
    domain = email_domain(email) if "@" in email else ""
    connection = active_connection_for_domain(domain) if domain else None
    if connection is None:
        raise ConnectionNotFound(NOT_FOUND_FOR_EMAIL)
    return connection


def connection_for_organization(reference: str) -> SsoConnection:
    """The active connection of the organization named by its slug or id. An organization with
    several active connections is ambiguous: the email decides then."""
    try:
        organization = Organization.objects.filter(pk=uuid.UUID(reference)).first()
    except ValueError:
        organization = Organization.objects.filter(slug=reference).first()
    connections = (
        list(organization.sso_connections.filter(is_active=True).select_related("organization")[:2])
        if organization
        else []
    )
    if not connections:
        raise ConnectionNotFound(NOT_FOUND_FOR_ORGANIZATION)
    if len(connections) > 1:
        message = "This organization has several single sign-on connections: give your email address instead."
        raise InvalidRequest(message, code="sso_email_required", fields={"organization": [message]})
    return connections[0]


def authorization_url(
    request: HttpRequest,
    connection: SsoConnection,
    *,
    login_hint: str | None = None,
    next_url: str | None = None,
    server_side_state: bool = False,
) -> str:
    """The identity provider's authorization URL for a new sign-in through ``connection``, with
    ``state``, ``nonce`` and the PKCE challenge; the state (with the verifier and the nonce) is
    kept for the callback."""
    if connection.organization.plan == Plan.FREE:
        raise PlanRequired(PLAN_MESSAGE)
    provider = get_adapter(request).get_provider(request, str(connection.id))
    try:
        response = provider.redirect(
            request,
            "login",
            next_url=next_url,
            login_hint=login_hint,
            server_side_state=server_side_state,
        )
    except RefusedEndpoint as error:
        # Not worth retrying: the connection or its discovery document names an address the gateway
        # will not call (logged with the host by apps/sso/addresses.py; not told to this caller).
        raise ProviderUnavailable(
            "The identity provider's issuer or one of its endpoints is at an address the gateway may not "
            "call; ask an owner to check the connection's issuer.",
            code="sso_address_refused",
        ) from error
    except (RequestException, OAuth2Error, OneLogin_Saml2_Error, ValueError) as error:
        raise _unavailable() from error
    if response.status_code != 302:  # allauth rendered its error page instead of redirecting
        raise _unavailable()
    return response["Location"]


def _unavailable() -> ProviderUnavailable:
    return ProviderUnavailable(
        "The identity provider could not be reached or its discovery document is not usable; try again "
        "later or ask an owner to check the connection's issuer."
    )
