"""allauth's pages for a signed-in person (reauthentication, two-factor set-up, recovery codes),
shown inside the console: the same views, with the console's navigation (``console`` in the
context, as apps/console/access.py builds it).

The console sits above accounts, so it adds its context through ``register_page_context`` in its
``AppConfig.ready`` (every process runs it) rather than being imported here.
"""

from collections.abc import Callable

from allauth.account import views as account_views
from allauth.mfa.base import views as mfa_views
from allauth.mfa.recovery_codes import views as recovery_views
from allauth.mfa.totp import views as totp_views
from django.http import HttpRequest
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache

PageContext = Callable[[HttpRequest], dict]

# What the pages of a signed-in person add to their context, in the order registered.
page_contexts: list[PageContext] = []


def register_page_context(page_context: PageContext) -> None:
    if page_context not in page_contexts:  # ready() may run more than once in a test process
        page_contexts.append(page_context)


class ConsolePage:
    def get_context_data(self, **kwargs) -> dict:
        context = super().get_context_data(**kwargs)
        if self.request.user.is_authenticated:
            for page_context in page_contexts:
                context.update(page_context(self.request))
        return context


class ReauthenticateView(ConsolePage, account_views.ReauthenticateView):
    pass


class MfaReauthenticateView(ConsolePage, mfa_views.ReauthenticateView):
    pass


class MfaIndexView(ConsolePage, mfa_views.IndexView):
    pass


@method_decorator(never_cache, name="dispatch")  # shows a secret once
class ActivateTotpView(ConsolePage, totp_views.ActivateTOTPView):
    pass


class DeactivateTotpView(ConsolePage, totp_views.DeactivateTOTPView):
    pass


@method_decorator(never_cache, name="dispatch")  # shows a secret once
class RecoveryCodesView(ConsolePage, recovery_views.ViewRecoveryCodesView):
    pass


@method_decorator(never_cache, name="dispatch")  # shows a secret once
class GenerateRecoveryCodesView(ConsolePage, recovery_views.GenerateRecoveryCodesView):
    pass
