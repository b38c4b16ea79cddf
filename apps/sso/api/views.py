from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.schema import ErrorSerializer, ManagementAutoSchema
from apps.organizations.models import Role
from apps.organizations.tenancy import OrganizationScopedViewSet
from apps.sso import services, signin
from apps.sso.models import SsoConnection, SsoDomain

from .serializers import (
    SsoAuthorizationSerializer,
    SsoConnectionSerializer,
    SsoConnectionWriteSerializer,
    SsoDomainSerializer,
    SsoInitiateSerializer,
)


class SsoConnectionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The organization's single sign-on connections (docs/sso.md). Owners only, for every method;
    the growth and enterprise plans only for creating or activating one (403 plan_required)."""

    queryset = SsoConnection.objects.all()
    serializer_class = SsoConnectionSerializer
    read_role = Role.OWNER
    write_role = Role.OWNER
    http_method_names = ["get", "post", "patch", "delete", "options"]
    # A domain of another active connection.
    error_statuses = {"create": (409,), "partial_update": (409,)}

    @extend_schema(request=SsoConnectionWriteSerializer, responses={201: SsoConnectionSerializer})
    def create(self, request):
        connection = services.sso_connection_create(organization=self.organization, data=request.data)
        return Response(SsoConnectionSerializer(connection).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=SsoConnectionWriteSerializer, responses={200: SsoConnectionSerializer})
    def partial_update(self, request, pk=None):
        connection = self.get_object()
        connection = services.sso_connection_update(connection=connection, data=request.data)
        return Response(SsoConnectionSerializer(connection).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.sso_connection_delete(connection=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class SsoDomainViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrganizationScopedViewSet):
    """The email domains the organization's connections name, proved or not (docs/sso.md, "Proving a
    domain"). Owners only. A domain appears when a connection names it and goes when none does."""

    queryset = SsoDomain.objects.all()
    serializer_class = SsoDomainSerializer
    read_role = Role.OWNER
    write_role = Role.OWNER
    http_method_names = ["get", "post", "options"]
    # The TXT record not found; proved by another organization (503 below: no resolver answered).
    error_statuses = {"verify": (400, 409)}

    @extend_schema(
        request=None,
        responses={
            200: SsoDomainSerializer,
            503: OpenApiResponse(
                ErrorSerializer, description="No DNS resolver answered in time (`sso_dns_unavailable`)."
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def verify(self, request, pk=None):
        """Looks for the domain's TXT record now; proved when it holds the domain's value."""
        sso_domain = services.sso_domain_verify_dns(sso_domain=self.get_object())
        return Response(SsoDomainSerializer(sso_domain).data)


class _BodyRequired(ManagementAutoSchema):
    """The body is required (one of its two fields is), which drf-spectacular reads only from a
    top-level ``required`` list."""

    def _get_request_body(self, direction="request"):
        body = super()._get_request_body(direction)
        if body:
            body["required"] = True
        return body


class SsoInitiateView(APIView):
    """Starts a single sign-on (docs/sso.md): the identity provider's authorization URL for the
    active connection that claims the email's domain, or the organization's one connection. The
    state, the PKCE verifier and the nonce are kept on the server for the callback, for 10 minutes
    and one use. Open the URL in the browser that should be signed in to the console."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    error_statuses = {"post": (400, 403, 404)}
    schema = _BodyRequired()

    @extend_schema(
        request=SsoInitiateSerializer,
        responses={
            200: SsoAuthorizationSerializer,
            503: OpenApiResponse(
                ErrorSerializer,
                description="The identity provider's discovery document could not be read "
                "(`sso_provider_unavailable`), or the issuer or a URL of that document is at an "
                "address the gateway may not call (`sso_address_refused`).",
            ),
        },
        auth=[],
    )
    def post(self, request):
        serializer = SsoInitiateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        email = serializer.validated_data.get("email")
        if email is not None:
            connection = signin.connection_for_email(email)
        else:
            connection = signin.connection_for_organization(serializer.validated_data["organization"])
        url = signin.authorization_url(
            request._request,
            connection,
            login_hint=email,
            next_url=settings.LOGIN_REDIRECT_URL,
            server_side_state=True,
        )
        return Response({"authorization_url": url})
