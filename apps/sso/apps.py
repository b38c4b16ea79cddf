from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "apps.sso"
    label = "sso"

    def ready(self) -> None:
        """Registers ``require_sso`` (policy.py) as a rule that may refuse a password sign-in
        (apps/accounts/password_rules.py): the API's login and the console's login form are below
        sso and ask the registry rather than import it. Registers the connections' encrypted client
        secrets with apps/core/stored_secrets.py, for ``manage.py reencrypt_secrets``, which lives
        in core and cannot import sso."""
        from apps.accounts import password_rules
        from apps.core import stored_secrets

        from .models import SsoConnection
        from .policy import password_refusals, password_sign_in_refusal

        password_rules.register(refusals=password_refusals, sign_in_refusal=password_sign_in_refusal)
        stored_secrets.register(
            SsoConnection.objects.all(), ("client_secret_encrypted",), label="SSO connection"
        )
