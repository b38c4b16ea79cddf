"""The console's sign-in pages that django-allauth serves, under /console/auth/ (gateway_project/urls.py).

allauth reverses its URL names without a namespace, so they live here rather than in the console's
``console:`` namespace. Only what the console uses is routed: no public sign-up form (the view
answers that sign-up is closed), no password reset or email management (nothing sends mail here),
no WebAuthn. The pages of a signed-in person show the console's navigation (apps/accounts/views.py).
"""

from allauth.account import views as account_views
from allauth.mfa.base import views as mfa_views
from allauth.socialaccount import views as social_views
from allauth.socialaccount.providers.saml import views as saml_views
from django.urls import path, re_path
from django.views.generic import RedirectView

from apps.accounts import views as account_pages

from . import saml, views

UUID = r"[0-9a-fA-F-]{36}"

urlpatterns = [
    # allauth sends people to "account_login" (an expired two-factor step, a reauthentication):
    # that is the console's sign-in page.
    path(
        "login/",
        RedirectView.as_view(pattern_name="console:login", query_string=True),
        name="account_login",
    ),
    path("logout/", account_views.logout, name="account_logout"),
    path("inactive/", account_views.account_inactive, name="account_inactive"),
    path("signup/", account_views.signup, name="account_signup"),
    path("reauthenticate/", account_pages.ReauthenticateView.as_view(), name="account_reauthenticate"),
    # Two-factor authentication (allauth.mfa): the sign-in step, and the set-up pages.
    path("2fa/", account_pages.MfaIndexView.as_view(), name="mfa_index"),
    path("2fa/authenticate/", mfa_views.authenticate, name="mfa_authenticate"),
    path("2fa/reauthenticate/", account_pages.MfaReauthenticateView.as_view(), name="mfa_reauthenticate"),
    path("2fa/totp/activate/", account_pages.ActivateTotpView.as_view(), name="mfa_activate_totp"),
    path("2fa/totp/deactivate/", account_pages.DeactivateTotpView.as_view(), name="mfa_deactivate_totp"),
    path("2fa/recovery-codes/", account_pages.RecoveryCodesView.as_view(), name="mfa_view_recovery_codes"),
    path(
        "2fa/recovery-codes/generate/",
        account_pages.GenerateRecoveryCodesView.as_view(),
        name="mfa_generate_recovery_codes",
    ),
    # Single sign-on (apps/sso/oidc.py): the start, the identity provider's callback, errors.
    re_path(rf"^sso/(?P<provider_id>{UUID})/login/$", views.login, name="sso_login"),
    re_path(rf"^sso/(?P<provider_id>{UUID})/callback/$", views.callback, name="sso_callback"),
    # SAML 2.0 connections (apps/sso/saml.py): allauth's names and its ACS, the rest ours.
    re_path(rf"^sso/saml/(?P<organization_slug>{UUID})/acs/$", saml_views.acs, name="saml_acs"),
    re_path(
        rf"^sso/saml/(?P<organization_slug>{UUID})/acs/finish/$", saml.finish_acs, name="saml_finish_acs"
    ),
    re_path(rf"^sso/saml/(?P<organization_slug>{UUID})/metadata/$", saml.metadata, name="saml_metadata"),
    re_path(rf"^sso/saml/(?P<organization_slug>{UUID})/login/$", saml_views.login, name="saml_login"),
    re_path(rf"^sso/saml/(?P<organization_slug>{UUID})/sls/$", saml.sls, name="saml_sls"),
    path("sso/login/cancelled/", social_views.login_cancelled, name="socialaccount_login_cancelled"),
    path("sso/login/error/", social_views.login_error, name="socialaccount_login_error"),
]
