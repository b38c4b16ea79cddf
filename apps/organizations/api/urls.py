from django.urls import path
from rest_framework.routers import SimpleRouter

from .invitations import OrganizationInvitationViewSet, ReceivedInvitationViewSet
from .login import LoginView

router = SimpleRouter(trailing_slash=False)
router.register(
    "organizations/current/invitations", OrganizationInvitationViewSet, basename="organization-invitation"
)
router.register("invitations", ReceivedInvitationViewSet, basename="invitation")

urlpatterns = [
    path("auth/login", LoginView.as_view(), name="auth-login"),
    *router.urls,
]
