"""Two-factor codes outside allauth's pages: the management API's password login asks for one when
the account has TOTP set up (the console asks through allauth's two-factor stage)."""

from allauth.mfa.models import Authenticator

from . import login_throttle


def has_two_factor(user) -> bool:
    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()


def verify_code(*, user, code: str, request=None) -> bool:
    """True when ``code`` is the authenticator app's current code (each code once) or one of the
    account's unused recovery codes (then used up). A wrong code counts as a failed sign-in, so the
    login lock-out bounds guessing."""
    authenticators = Authenticator.objects.filter(
        user=user, type__in=(Authenticator.Type.TOTP, Authenticator.Type.RECOVERY_CODES)
    ).order_by("type")  # recovery_codes before totp does not matter: a code fits one of them
    for authenticator in authenticators:
        if authenticator.wrap().validate_code(code):
            authenticator.record_usage()
            return True
    login_throttle.record_failure(username=user.email, client_ip=login_throttle.client_address(request))
    return False
