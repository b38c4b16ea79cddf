"""Two-factor codes outside allauth's pages: the management API's password login asks for one when
the account has TOTP set up (the console asks through allauth's two-factor stage)."""

import logging

from allauth.mfa.models import Authenticator

from apps.core.crypto import InvalidToken

from . import login_throttle

logger = logging.getLogger(__name__)


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
        try:
            valid = authenticator.wrap().validate_code(code)
        except InvalidToken:
            # Encrypted under a key no longer in GATEWAY_ENCRYPTION_KEYS (reencrypt_secrets was not
            # run before it was dropped): the code cannot be checked, so it is refused, not a 500.
            logger.error("Two-factor secret of user %s cannot be decrypted with the current keys", user.pk)
            continue
        if valid:
            authenticator.record_usage()
            return True
    login_throttle.record_failure(username=user.email, client_ip=login_throttle.client_address(request))
    return False
