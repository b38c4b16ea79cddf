from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self) -> None:
        """Connects the login throttle's signal (failed sign-ins are counted on every path), and
        registers the two-factor secrets allauth keeps encrypted in ``Authenticator.data`` (by
        ``MfaAdapter``) with apps/core/stored_secrets.py, for ``manage.py reencrypt_secrets``, which
        lives in core and cannot import accounts."""
        from allauth.mfa.models import Authenticator

        from apps.core import stored_secrets

        from . import login_throttle  # noqa: F401
        from .adapter import reencrypt_authenticator

        # WebAuthn keys are public keys, stored in clear by allauth; the gateway does not offer them.
        stored_secrets.register(
            Authenticator.objects.filter(
                type__in=(Authenticator.Type.TOTP, Authenticator.Type.RECOVERY_CODES)
            ),
            ("data",),
            label="two-factor authenticator",
            reencrypt=reencrypt_authenticator,
        )
