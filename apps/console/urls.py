from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from .areas import area_modules
from .views import session

app_name = "console"
# Where /console/ leads: the first area of the navigation.
HOME = area_modules()[0].NAVIGATION.url_name

urlpatterns = [
    path("", RedirectView.as_view(pattern_name=HOME), name="home"),
    path("login/", session.ConsoleLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("organization/", session.switch_organization, name="switch-organization"),
    *(pattern for module in area_modules() for pattern in module.urlpatterns),
]
