"""SAML 2.0 connections through django-allauth's SAML provider (python3-saml), docs/sso.md.

Each active SAML ``SsoConnection`` is one allauth app of ``SsoSamlProvider`` (id ``saml``), built at
request time by apps/sso/adapter.py like the OpenID Connect ones: the app's ``client_id`` (allauth's
"organization slug" in the SAML URLs) and ``provider_id`` are the connection's id. allauth's SAML
views are used for the parts it gets right (the ACS that survives the SameSite session cookie, the
service provider's metadata); the ACS's second half is ours (``finish_acs``) because allauth's:

- accepts an unsolicited (IdP-initiated) response when an app says so; ours never does: the
  response must answer an AuthnRequest of this gateway (``InResponseTo``), whose state is taken once;
- keeps the state only in the browser's session; a sign-in started through the API keeps it on the
  server (apps/sso/state.py), keyed by the AuthnRequest's id;
- does not remember the assertions it accepted; ours refuses an assertion id seen before.

python3-saml, in strict mode, checks the rest: the signature (of the response or the assertion,
with the connection's certificate; an unsigned response is refused), the audience (the gateway's
entity id for this connection), the destination and recipient (this ACS URL), the issuer (the
connection's entity id) and the time conditions (NotBefore, NotOnOrAfter, with its small clock
skew). After that, apps/sso/adapter.py applies the same rules as for OpenID Connect: the connection
active, a paid plan, the email's domain allowed, just-in-time membership with the default role.
"""

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from allauth.account.internal.decorators import login_not_required
from allauth.core.internal import httpkit
from allauth.socialaccount.helpers import complete_social_login
from allauth.socialaccount.internal import statekit
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.base.constants import AuthProcess
from allauth.socialaccount.providers.saml.provider import SAMLProvider
from allauth.socialaccount.sessions import LoginSession
from allauth.utils import build_absolute_uri
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from . import state as server_state
from .models import SsoConnection

# python3-saml (with lxml and xmlsec) loads on a SAML sign-in, not when allauth registers this
# module's provider at start-up: a server process that only proxies never loads it (issue 23).
if TYPE_CHECKING:
    from onelogin.saml2.auth import OneLogin_Saml2_Auth

logger = logging.getLogger(__name__)

SAML_PROVIDER = "saml"
# An accepted assertion's id is remembered this long at least (python3-saml allows 120 s of skew
# beyond NotOnOrAfter; identity providers give a few minutes).
ASSERTION_MEMORY_SECONDS = 3600


def sp_urls(request: HttpRequest, connection_id) -> dict:
    """The gateway's side of a SAML connection: its entity id (the metadata's URL), the assertion
    consumer service (ACS) URL and the metadata URL; ``https`` when ``GATEWAY_HTTPS`` is on."""
    args = [str(connection_id)]
    metadata = build_absolute_uri(request, reverse("saml_metadata", args=args))
    return {
        "entity_id": metadata,
        "acs_url": build_absolute_uri(request, reverse("saml_acs", args=args)),
        "metadata_url": metadata,
    }


def social_app(connection: SsoConnection) -> SocialApp:
    """The allauth app of a SAML connection; never saved."""
    return SocialApp(
        provider=SAML_PROVIDER,
        provider_id=str(connection.id),
        name=connection.name,
        client_id=str(connection.id),
        secret="",
        settings={
            "idp": {
                "entity_id": connection.idp_entity_id,
                "sso_url": connection.idp_sso_url,
                "x509cert": connection.idp_certificate,
            },
            "advanced": {
                "strict": True,
                "reject_idp_initiated_sso": True,
                "reject_deprecated_algorithm": True,
                "want_attribute_statement": False,
                # An intranet host (https://adfs/...) is a valid SSO URL, as the API accepts it.
                "allow_single_label_domains": True,
            },
        },
    )


def build_auth(request: HttpRequest, provider) -> "OneLogin_Saml2_Auth":
    """allauth's ``build_auth`` with the service provider's URLs built as the rest of the gateway
    builds its absolute URLs (``GATEWAY_HTTPS``), so what the console tells owners to register at
    the identity provider is what the checks compare with."""
    from allauth.socialaccount.providers.saml import utils as saml_utils
    from onelogin.saml2.auth import OneLogin_Saml2_Auth

    urls = sp_urls(request, provider.app.client_id)
    acs = urlsplit(urls["acs_url"])
    req = {
        "https": "on" if acs.scheme == "https" else "off",
        "http_host": acs.netloc,
        "script_name": request.META.get("SCRIPT_NAME", ""),
        "path_info": request.path_info,
        "get_data": request.GET.copy(),
        "post_data": request.POST.copy(),
    }
    config = saml_utils.build_saml_config(request, provider.app.settings, provider.app.client_id)
    config["sp"]["entityId"] = urls["entity_id"]
    config["sp"]["assertionConsumerService"]["url"] = urls["acs_url"]
    config["sp"].pop("singleLogoutService", None)  # single logout is not offered
    return OneLogin_Saml2_Auth(req, config)


class SsoSamlProvider(SAMLProvider):
    """allauth's SAML provider for the connections: sign-in only, the state (keyed by the
    AuthnRequest's id) in the browser's session or, for a sign-in started through the API, on the
    server; the email read from the assertion's attributes (or an email-format NameID)."""

    id = SAML_PROVIDER
    name = "Single sign-on (SAML)"
    supports_token_authentication = False

    def get_login_url(self, request: HttpRequest, **kwargs) -> str:
        return reverse("saml_login", args=[self.app.client_id])

    def redirect(self, request: HttpRequest, process, next_url=None, data=None, **kwargs):
        from django.http import HttpResponseRedirect

        kwargs.pop("login_hint", None)  # no standard AuthnRequest parameter carries it
        server_side = bool(kwargs.pop("server_side_state", False))
        auth = build_auth(request, self)
        url = auth.login(return_to="")
        request_id = auth.get_last_request_id()
        if server_side:
            state = {"process": AuthProcess.LOGIN, "data": data}
            if next_url:
                state["next"] = next_url
            server_state.stash(state, provider_id=self.sub_id, state_id=request_id)
        else:
            self.stash_redirect_state(request, AuthProcess.LOGIN, next_url, data, state_id=request_id)
        return HttpResponseRedirect(url)

    def take_state(self, request: HttpRequest, request_id: str | None) -> dict | None:
        """The state of the AuthnRequest ``request_id`` answers, once: from this browser's session,
        else from the server; None when there is none (forged, replayed, expired, another
        connection's)."""
        if not request_id:
            return None
        return statekit.unstash_state(
            request, provider_id=self.sub_id, state_id=request_id
        ) or server_state.take(request_id, provider_id=self.sub_id)

    def extract_extra_data(self, data) -> dict:
        fields = self._extract(data)
        verified = fields.get("email_verified")
        return {
            "attributes": data.get_attributes(),
            "name_id": data.get_nameid(),
            # SAML has no standard "verified" flag: the identity provider asserting the address is
            # the verification, unless it says otherwise (an email_verified attribute of false).
            "claims": {"email": fields.get("email"), "email_verified": verified is not False},
        }

    def serialize(self) -> dict:
        return {"id": self.sub_id}


def _provider(request: HttpRequest, connection_id: str) -> SsoSamlProvider:
    from allauth.socialaccount.providers.saml import utils as saml_utils

    return saml_utils.get_app_or_404(request, connection_id).get_provider(request)


def refusal(request: HttpRequest, message: str, *, status: int = 401) -> HttpResponse:
    return render(request, "socialaccount/refused.html", {"message": message}, status=status)


REFUSED = "The identity provider's answer was refused: {reason}. Nothing was signed in; start again."


@login_not_required
def finish_acs(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """The ACS's second half (``saml_finish_acs``): the response allauth's ``acs`` kept, checked.

    A response to a sign-in started on the console's page is tied to this browser (its state is in
    the session). One to a sign-in started through the API is not, so this browser confirms it
    first with a POST (CSRF-checked), as for OpenID Connect: otherwise a response someone made for
    themselves and sent to another person would sign that person in to the sender's organization."""
    from onelogin.saml2.errors import OneLogin_Saml2_Error, OneLogin_Saml2_ValidationError

    if request.method not in ("GET", "POST"):
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    try:
        provider = _provider(request, organization_slug)
    except Http404:
        return refusal(request, "This single sign-on connection is not active.", status=404)
    acs_session = LoginSession(request, "saml_acs_session", "saml-acs-session")
    data = acs_session.store.get("request")
    if not data:
        return refusal(request, REFUSED.format(reason="no response was posted"), status=400)
    acs_request = httpkit.deserialize_request(data, HttpRequest())
    auth = build_auth(acs_request, provider)
    try:
        auth.process_response(request_id=None)  # InResponseTo is matched with a stashed state below
    except (OneLogin_Saml2_Error, OneLogin_Saml2_ValidationError, ValueError) as error:
        acs_session.delete()
        logger.warning("SAML response refused for connection %s: %s", organization_slug, type(error).__name__)
        return refusal(request, REFUSED.format(reason="it is not a readable SAML response"))
    if auth.get_errors() or not auth.is_authenticated():
        acs_session.delete()
        logger.warning(
            "SAML response refused for connection %s: %s (%s)",
            organization_slug,
            ", ".join(auth.get_errors()),
            auth.get_last_error_reason(),
        )
        return refusal(request, REFUSED.format(reason=_reason(auth.get_last_error_reason() or "")))
    request_id = auth.get_last_response_in_response_to()
    in_this_browser = bool(request_id) and request_id in statekit.get_states(request)
    if (
        not in_this_browser
        and request.method == "GET"
        and server_state.waiting(request_id, provider_id=provider.sub_id)
    ):
        connection = SsoConnection.objects.select_related("organization").get(pk=provider.sub_id)
        return render(
            request,
            "sso/saml_confirm.html",
            {"organization": connection.organization, "connection": connection},
        )
    acs_session.delete()
    state = provider.take_state(request, request_id)
    if state is None:
        logger.warning(
            "SAML response refused for connection %s: no state for InResponseTo", organization_slug
        )
        return refusal(
            request,
            REFUSED.format(
                reason="it does not answer a sign-in started here, or that sign-in was finished or "
                "expired (a response is accepted once, within 10 minutes)"
            ),
        )
    assertion_id = auth.get_last_assertion_id()
    if not assertion_id or not cache.add(
        f"sso:saml-assertion:{organization_slug}:{assertion_id}", 1, ASSERTION_MEMORY_SECONDS
    ):
        return refusal(request, REFUSED.format(reason="this assertion was used before"))
    login = provider.sociallogin_from_response(request, auth)
    login.state = state
    return complete_social_login(request, login)


def _reason(text: str) -> str:
    """python3-saml's reason, in a few words a person can act on (its text can quote the response)."""
    lowered = text.lower()
    for needle, reason in (
        ("signature", "its signature does not verify with the connection's certificate"),
        ("audience", "it is meant for another service provider (audience)"),
        ("destination", "it was sent to another address (destination)"),
        ("recipient", "it was sent to another address (recipient)"),
        ("expired", "it has expired"),
        ("notonorafter", "it has expired"),
        ("not yet valid", "it is not valid yet"),
        ("notbefore", "it is not valid yet"),
        ("issuer", "it comes from another identity provider (issuer)"),
        ("status", "the identity provider did not sign the person in"),
    ):
        if needle in lowered:
            return reason
    return "it did not pass the checks"


@require_POST
@login_not_required
def sls(request: HttpRequest, organization_slug: str) -> HttpResponse:
    return HttpResponse("Single logout is not offered.", status=404, content_type="text/plain")


@login_not_required
def metadata(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """The gateway's service-provider metadata for the connection (its entity id and ACS URL)."""
    auth = build_auth(request, _provider(request, organization_slug))
    return HttpResponse(auth.get_settings().get_sp_metadata(), content_type="application/samlmetadata+xml")
