"""Signing in and out of the console, and choosing the organization to work in."""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from apps.console.access import choose_organization


class ConsoleLoginView(auth_views.LoginView):
    """Email and password, through ``authenticate()``: failed attempts are counted and locked out by
    apps/accounts/login_throttle.py, as on the management API's login and /admin/login."""

    template_name = "console/login.html"
    redirect_authenticated_user = True


@require_POST
def switch_organization(request):
    if not request.user.is_authenticated:
        return redirect("console:login")
    if not choose_organization(request, request.POST.get("organization_id", "")):
        messages.error(request, "You are not a member of that organization.")
    return redirect("console:home")
