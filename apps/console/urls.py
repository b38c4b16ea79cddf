from django.urls import path
from django.views.generic import RedirectView

from .areas import HOME, area_modules
from .views import invitations, session

app_name = "console"
urlpatterns = [
    # /console/ leads to the first page of the navigation.
    path("", RedirectView.as_view(pattern_name=HOME), name="home"),
    # Sign-in, sign-out and the account's own pages (login, login-sso, logout, account, account-password,
    # account-tokens).
    *session.urlpatterns,
    path("organization/", session.switch_organization, name="switch-organization"),
    # The invited person's pages (no membership needed): their invitations and the accept link.
    *invitations.urlpatterns,
    *(pattern for module in area_modules() for pattern in module.urlpatterns),
]
