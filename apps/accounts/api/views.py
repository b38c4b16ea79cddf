from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import services

from .serializers import LoginSerializer, RefreshSerializer, SessionSerializer


class LoginView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    # 403: sso_required (the organization requires single sign-on; docs/sso.md) or no_organization.
    error_statuses = {"post": (400, 401, 403, 429)}

    @extend_schema(request=LoginSerializer, responses={200: SessionSerializer}, auth=[])
    def post(self, request):
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        session = services.session_login(request=request, **serializer.validated_data)
        return Response(session)


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
