"""Signing in and out of the console, the account's own pages, and choosing the organization.

Sign-in is django-allauth's login flow (settings: ACCOUNT_*; apps/accounts/adapter.py): email and
password, failed attempts counted and locked out by apps/accounts/login_throttle.py (as on the
management API's login and /admin/login), then allauth's two-factor stage when the account has TOTP;
or single sign-on through the organization's identity provider (apps/sso). docs/sso.md.
"""

from allauth.account import views as allauth_views
from allauth.mfa.models import Authenticator
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.shortcuts import redirect, render
from django.urls import path
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.accounts.forms import ConsoleLoginForm
from apps.accounts.login_throttle import client_address
from apps.accounts.services import account_password_change
from apps.accounts.two_factor import has_two_factor
from apps.console.access import Console, choose_organization, console_view
from apps.console.forms import FORM, service_errors
from apps.core.errors import GatewayError
from apps.organizations.member_sessions import session_issue
from apps.sso import signin
from apps.sso.policy import email_domain
from apps.sso.selectors import active_connection_for_domain


class ConsoleLoginView(allauth_views.LoginView):
    """Email and password (allauth's form: ``login`` and ``password``), and beside it the "Sign in
    with SSO" form, which posts to ``sso_start``."""

    template_name = "console/login.html"

    def get_context_data(self, **kwargs) -> dict:
        context = super().get_context_data(**kwargs)
        context.setdefault("sso_email", "")
        return context


def _safe_next(request) -> str | None:
    next_url = request.POST.get("next") or request.GET.get("next")
    if next_url and url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return next_url
    return None


@require_POST
def sso_start(request):
    """The "Sign in with SSO" button: the connection that claims the email's domain, then off to
    its identity provider (the state, nonce and PKCE verifier kept in this browser's session)."""
    email = request.POST.get("email", "").strip()[:254]
    try:
        connection = signin.connection_for_email(email)
        url = signin.authorization_url(request, connection, login_hint=email, next_url=_safe_next(request))
    except GatewayError as error:
        context = {
            "form": ConsoleLoginForm(request=request),
            "sso_email": email,
            "sso_error": error.message,
            "redirect_field_value": _safe_next(request) or "",
        }
        return render(request, "console/login.html", context, status=error.status)
    return redirect(url)


# Sign-out is allauth's: a POST (CSRF-checked) ends the session; a GET only asks.
logout = allauth_views.LogoutView.as_view()


@require_POST
def switch_organization(request):
    if not request.user.is_authenticated:
        return redirect("console:login")
    if not choose_organization(request, request.POST.get("organization_id", "")):
        messages.error(request, "You are not a member of that organization.")
    return redirect("console:home")


def _account_page(request, console: Console, *, password_errors=None, status: int = 200):
    """``password_errors``: the change-password form's, by field (``FORM`` for the form's own)."""
    recovery = Authenticator.objects.filter(user=console.user, type=Authenticator.Type.RECOVERY_CODES).first()
    connection = active_connection_for_domain(email_domain(console.user.email))
    password_errors = dict(password_errors or {})
    return render(
        request,
        "console/account/index.html",
        {
            "console": console,
            "two_factor": has_two_factor(console.user),
            "recovery_codes_left": len(recovery.wrap().get_unused_codes()) if recovery else None,
            # An account single sign-on made has none; its identity provider keeps the password.
            "has_password": console.user.has_usable_password(),
            "sso_connection": connection,
            # A template cannot read the key "__all__".
            "password_form_errors": password_errors.pop(FORM, []),
            "password_errors": password_errors,
        },
        status=status,
    )


@console_view()
def account(request, console: Console):
    """The signed-in person's own page: password, two-factor authentication and single sign-on."""
    return _account_page(request, console)


@console_view(methods=("POST",))
def account_password(request, console: Console):
    """Changes the password through the service ``POST /api/v1/auth/password`` calls. This browser
    stays signed in (its session's hash follows the new password); every other session of the account,
    in a browser or the management API, ends."""
    new_password = request.POST.get("new_password", "")
    if new_password != request.POST.get("new_password_confirmation", ""):
        errors = {"new_password_confirmation": ["The two new passwords differ."]}
        return _account_page(request, console, password_errors=errors, status=400)
    try:
        account_password_change(
            user=console.user,
            data={"current_password": request.POST.get("current_password", ""), "new_password": new_password},
            client_ip=client_address(request),
        )
    except GatewayError as error:
        return _account_page(request, console, password_errors=service_errors(error), status=error.status)
    update_session_auth_hash(request, console.user)
    messages.success(request, "Your password is changed. Every other session of your account is signed out.")
    return redirect("console:account")


@never_cache  # the answer carries the only copy of the tokens
@console_view(methods=("GET", "POST"))
def account_tokens(request, console: Console):
    """Session tokens for scripts (the pair ``POST /api/v1/auth/login`` answers), for the
    organization the console is in; shown once. The way to the management API after single sign-on,
    where there is no password to log in with."""
    context = {
        "console": console,
        "tokens": None,
        "access_minutes": int(settings.SIMPLE_JWT["ACCESS_TOKEN_LIFETIME"].total_seconds() // 60),
        "max_days": settings.GATEWAY_SESSION_MAX_AGE_DAYS,
    }
    if request.method == "POST":
        context["tokens"] = session_issue(user=console.user, organization_id=console.organization.id)
        return render(request, "console/account/tokens.html", context, status=201)
    return render(request, "console/account/tokens.html", context)


urlpatterns = [
    path("login/", ConsoleLoginView.as_view(), name="login"),
    path("login/sso/", sso_start, name="login-sso"),
    path("logout/", logout, name="logout"),
    path("account/", account, name="account"),
    path("account/password", account_password, name="account-password"),
    path("account/tokens", account_tokens, name="account-tokens"),
]
