from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework_simplejwt.exceptions import InvalidToken
from rest_framework_simplejwt.serializers import TokenRefreshSerializer

from apps.accounts import services

from .serializers import LoginSerializer, RefreshSerializer, SessionSerializer


class LoginView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    error_statuses = {"post": (400, 401, 429)}

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
        # simplejwt rotates the refresh token and blacklists the old one (ROTATE_REFRESH_TOKENS).
        serializer = TokenRefreshSerializer(data=request.data)
        try:
            serializer.is_valid(raise_exception=True)
        except ObjectDoesNotExist as error:  # the token's user has been deleted
            raise InvalidToken("The session's user no longer exists.") from error
        return Response(serializer.validated_data)


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
