"""Refreshing and ending a management session; signing in to an organization is tenancy's
(apps/organizations/api/login.py, ``POST /api/v1/auth/login``)."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import services

from .serializers import RefreshSerializer, SessionSerializer


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
