from django.urls import path
from django.views.generic import RedirectView

from .areas import area_modules
from .views import invitations, session

app_name = "console"
# Where /console/ leads: the first area of the navigation.
HOME = area_modules()[0].NAVIGATION.url_name

urlpatterns = [
    path("", RedirectView.as_view(pattern_name=HOME), name="home"),
    # Sign-in, sign-out and the account's own pages (login, login-sso, logout, account, account-tokens).
    *session.urlpatterns,
    path("organization/", session.switch_organization, name="switch-organization"),
    # The invited person's pages (no membership needed): their invitations and the accept link.
    *invitations.urlpatterns,
    *(pattern for module in area_modules() for pattern in module.urlpatterns),
]
