"""``POST /api/v1/auth/login``: a session in one of the account's organizations
(apps/organizations/member_sessions.py). Refreshing and ending it are the accounts' (apps/accounts/api)."""

from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.api.serializers import LoginSerializer, SessionSerializer
from apps.organizations import member_sessions


class LoginView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    # 403: sso_required (the organization requires single sign-on; docs/sso.md) or no_organization.
    error_statuses = {"post": (400, 401, 403, 429)}

    @extend_schema(request=LoginSerializer, responses={200: SessionSerializer}, auth=[])
    def post(self, request):
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        session = member_sessions.session_login(request=request, **serializer.validated_data)
        return Response(session)
