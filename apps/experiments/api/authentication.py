"""API keys for the feedback endpoint only: an application sends feedback on a request with the key
that made it. Every other management view refuses API keys (apps/organizations/authentication.py).

The key is looked up by its SHA-256 digest and compared in constant time, as the proxy does
(apps/proxy/auth.py), but without the proxy's in-memory cache: feedback is not the hot path."""

import hmac
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.keys import selectors as key_selectors
from apps.keys.secrets import api_key_digest


@dataclass(frozen=True)
class ApiKeyContext:
    api_key_id: str
    organization_id: str


class FeedbackApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer sk_...``; any other bearer token is left to the session class."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace")
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        prefix = settings.GATEWAY_API_KEY_PREFIX
        looks_like_a_key = token.startswith("sk_") or (prefix and token.startswith(prefix))
        if scheme.lower() != "bearer" or not looks_like_a_key:
            return None
        digest = api_key_digest(token)
        api_key = key_selectors.api_key_by_digest(digest)
        if api_key is None or not hmac.compare_digest(api_key.key_digest, digest) or not api_key.is_active:
            raise exceptions.AuthenticationFailed(
                "Invalid API key, or the key has been revoked.", code="invalid_api_key"
            )
        if api_key.expires_at is not None and api_key.expires_at <= timezone.now():
            raise exceptions.AuthenticationFailed("This API key has expired.", code="api_key_expired")
        return AnonymousUser(), ApiKeyContext(
            api_key_id=str(api_key.id), organization_id=str(api_key.organization_id)
        )

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="feedback"'


class FeedbackApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = FeedbackApiKeyAuthentication
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A gateway API key (sk_...): the key that made the request.",
        }
