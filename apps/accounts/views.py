"""allauth's pages for a signed-in person (reauthentication, two-factor set-up, recovery codes),
shown inside the console: the same views, with the console's navigation (``console`` in the
context, as apps/console/access.py builds it).

The console sits above accounts, so it adds its context through ``register_page_context``
(page_context.py) rather than being imported here.
"""

from allauth.account import views as account_views
from allauth.mfa.base import views as mfa_views
from allauth.mfa.recovery_codes import views as recovery_views
from allauth.mfa.totp import views as totp_views
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache

from .page_context import page_contexts


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
