"""The identity provider's side of a single sign-on, as allauth's OAuth2 views for
apps/sso/oidc.py: the start (``sso_login``, a POST) and the callback (``sso_callback``)."""

from allauth.socialaccount.helpers import render_authentication_error
from allauth.socialaccount.internal import statekit
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.utils import get_request_param
from django.http import Http404, HttpRequest
from django.shortcuts import render
from requests import RequestException

from . import state as server_state
from .models import SsoConnection
from .oidc import SsoOAuth2Adapter


class SsoCallbackView(OAuth2CallbackView):
    """allauth's callback, with the state looked up in the browser's session (a sign-in started on
    the console's page) or, failing that, on the server (one started through the API); either way it
    is taken once. A missing, unknown, expired, reused or other connection's state is refused."""

    def dispatch(self, request: HttpRequest, *args, **kwargs):
        if request.method == "GET" and (confirmation := self._confirmation(request)) is not None:
            return confirmation
        try:
            return super().dispatch(request, *args, **kwargs)
        except (RequestException, OAuth2Error) as error:
            # The discovery document, read before allauth's own error handling starts.
            return render_authentication_error(request, self.adapter.get_provider(), exception=error)

    def _confirmation(self, request: HttpRequest):
        """A sign-in started through the API (its state on the server, not in this browser's session)
        is finished only once this browser confirms it with a POST (apps/sso/state.py says why)."""
        state_id = request.GET.get("state")
        provider = self.adapter.get_provider()
        if not state_id or state_id in statekit.get_states(request):
            return None
        if not server_state.waiting(state_id, provider_id=provider.sub_id):
            return None  # unknown, expired or taken: allauth's refusal follows
        connection = SsoConnection.objects.select_related("organization").filter(pk=provider.sub_id).first()
        if connection is None:
            return None
        return render(
            request,
            "socialaccount/confirm.html",
            {
                "organization": connection.organization,
                "connection": connection,
            },
        )

    def _get_state(self, request: HttpRequest, provider):
        state_id = get_request_param(request, "state")
        state = None
        if state_id:
            state = statekit.unstash_state(
                request, provider_id=provider.sub_id, state_id=state_id
            ) or server_state.take(state_id, provider_id=provider.sub_id)
        if state is None:
            return None, render_authentication_error(
                request, provider, extra_context={"state_id": state_id, "callback_view": self}
            )
        self.adapter.state = state  # complete_login compares the id_token's nonce with it
        return state, None


def _adapter_view(view_class, request: HttpRequest, provider_id: str):
    try:
        return view_class.adapter_view(SsoOAuth2Adapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:  # no such connection, or not active
        raise Http404 from None


def login(request: HttpRequest, provider_id: str):
    return _adapter_view(OAuth2LoginView, request, provider_id)


def callback(request: HttpRequest, provider_id: str):
    return _adapter_view(SsoCallbackView, request, provider_id)
