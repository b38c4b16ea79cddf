from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "apps.sso"
    label = "sso"

    def ready(self) -> None:
        """Registers ``require_sso`` (policy.py) as a rule that may refuse a password sign-in
        (apps/accounts/password_rules.py): the API's login and the console's login form are below
        sso and ask the registry rather than import it."""
        from apps.accounts import password_rules

        from .policy import password_refusals, password_sign_in_refusal

        password_rules.register(refusals=password_refusals, sign_in_refusal=password_sign_in_refusal)
