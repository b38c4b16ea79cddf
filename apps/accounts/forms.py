from allauth.account.forms import LoginForm
from django import forms
from django.core.exceptions import ValidationError

from .password_rules import password_sign_in_refusal


class ConsoleLoginForm(LoginForm):
    """allauth's login form (fields ``login`` and ``password``), plus the organization's rule that
    its members sign in through single sign-on (``require_sso``, registered by apps/sso in
    apps/accounts/password_rules.py). The rule is checked only once the password is right, so it
    tells a guesser nothing about the account."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Without allauth's "forgotten password" link: there is no password reset by email here.
        self.fields["password"] = forms.CharField(
            label="Password",
            strip=False,
            max_length=1024,
            widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}),
        )

    def clean(self):
        cleaned = super().clean()
        if self.user is not None:
            refusal = password_sign_in_refusal(self.user)
            if refusal:
                raise ValidationError(refusal, code="sso_required")
        return cleaned
