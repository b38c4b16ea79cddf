"""Refreshing and ending a management session, and changing the account's password; signing in to
an organization is tenancy's (apps/organizations/api/login.py, ``POST /api/v1/auth/login``)."""

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import login_throttle, services
from apps.core.api.schema import ErrorSerializer

from .serializers import PasswordChangeSerializer, RefreshSerializer, SessionSerializer


class RefreshView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    error_statuses = {"post": (400, 401)}

    @extend_schema(request=RefreshSerializer, responses={200: SessionSerializer}, auth=[])
    def post(self, request):
        serializer = RefreshSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(services.session_refresh(refresh_token=serializer.validated_data["refresh"]))


class LogoutView(APIView):
    # No access token needed: a client whose access expired must still be able to end its session.
    authentication_classes: list = []
    permission_classes = [AllowAny]
    error_statuses = {"post": (400, 401)}

    @extend_schema(request=RefreshSerializer, responses={204: None}, auth=[])
    def post(self, request):
        serializer = RefreshSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.session_logout(refresh_token=serializer.validated_data["refresh"])
        return Response(status=status.HTTP_204_NO_CONTENT)


class PasswordChangeView(APIView):
    """Changes the signed-in account's password. `current_password` must be the account's (a wrong one
    counts as a failed sign-in, toward the same lock-out as the login's); `new_password` must pass the
    gateway's password validators. Every session of the account ends, this one included: its access
    and refresh tokens are refused from their next use (401 `password_changed`), so sign in again with
    the new password. The account's console sessions end too."""

    error_statuses = {"post": (429,)}

    @extend_schema(
        request=PasswordChangeSerializer,
        responses={
            204: None,
            403: OpenApiResponse(
                ErrorSerializer,
                description="The account has no password (`password_not_set`): it signs in through "
                "single sign-on, and its identity provider manages the password.",
            ),
        },
    )
    def post(self, request):
        services.account_password_change(
            user=request.user, data=request.data, client_ip=login_throttle.client_address(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
