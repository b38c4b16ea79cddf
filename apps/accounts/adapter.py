"""django-allauth, adapted to the gateway (settings: ACCOUNT_ADAPTER, MFA_ADAPTER; docs/sso.md).

- No public sign-up: owners and admins add people (apps/organizations), single sign-on adds its
  organization's members just in time (apps/sso/adapter.py).
- Failed passwords are counted and locked out by apps/accounts/login_throttle.py, the one counter
  every sign-in path shares (the API's login, /admin/login, the console); allauth's own counter is off.
- After a single sign-on, the console opens in the organization of the connection used, and only there.
- Two-factor secrets (the TOTP key, the recovery codes' seed) are encrypted at rest like every other
  secret the gateway keeps (apps/core/crypto.py), and re-encrypted with them after a key rotation
  (``manage.py reencrypt_secrets``).
"""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.mfa.adapter import DefaultMFAAdapter
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from apps.core import crypto

from . import login_throttle
from .sessions import pin_organization

SSO_ORGANIZATION_STATE = "gateway_organization_id"


def lockout_message() -> str:
    minutes = -(-settings.GATEWAY_LOGIN_FAILURE_WINDOW_SECONDS // 60)
    return f"Too many failed sign-in attempts; try again in {minutes} minutes."


class AccountAdapter(DefaultAccountAdapter):
    error_messages = {
        **DefaultAccountAdapter.error_messages,
        "email_password_mismatch": "Email or password is incorrect.",
    }

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return False

    def get_client_ip(self, request: HttpRequest) -> str:
        # The address gateway_project/client_address.py settled on, as the login counters use.
        return login_throttle.client_address(request) or "unknown"

    def pre_authenticate(self, request: HttpRequest, **credentials) -> None:
        """Asks the shared counters first, so a locked-out account is told why (the backend would
        refuse it anyway, with the generic message)."""
        username = credentials.get("email") or credentials.get("username") or ""
        if login_throttle.locked_out(username=username, client_ip=login_throttle.client_address(request)):
            raise self.validation_error("too_many_login_attempts")

    def authenticate(self, request: HttpRequest, **credentials):
        if credentials.get("email"):
            credentials["email"] = credentials["email"].strip().lower()  # accounts are stored lowercased
        return super().authenticate(request, **credentials)

    def validation_error(self, code: str, *args):
        if code == "too_many_login_attempts":
            return ValidationError(lockout_message(), code=code)
        return super().validation_error(code, *args)

    def post_login(self, request: HttpRequest, user, **kwargs):
        sociallogin = (kwargs.get("signal_kwargs") or {}).get("sociallogin")
        organization_id = sociallogin.state.get(SSO_ORGANIZATION_STATE) if sociallogin else None
        if organization_id:
            pin_organization(request, organization_id)
        return super().post_login(request, user, **kwargs)


class MfaAdapter(DefaultMFAAdapter):
    def encrypt(self, text: str) -> str:
        return crypto.encrypt(text)

    def decrypt(self, encrypted_text: str) -> str:
        return crypto.decrypt(encrypted_text)


def reencrypt_authenticator_data(data: dict) -> dict:
    """An allauth ``Authenticator.data`` with every value ``MfaAdapter.encrypt`` wrote re-encrypted
    under the first of ``GATEWAY_ENCRYPTION_KEYS`` (``manage.py reencrypt_secrets``): the TOTP key
    (``secret``), the recovery codes' seed (``seed``) and recovery codes migrated from another library
    (``migrated_codes``, a list). The rest (``used_mask``, ``viewed_at``) is kept as it is, so the same
    codes stay valid and used ones stay used. Raises ``crypto.InvalidToken`` when no key can read one."""
    data = dict(data)
    for key in ("secret", "seed"):
        if data.get(key):
            data[key] = crypto.reencrypt(data[key])
    if data.get("migrated_codes"):
        data["migrated_codes"] = [crypto.reencrypt(code) for code in data["migrated_codes"]]
    return data


def reencrypt_authenticator(row, fields: tuple[str, ...]) -> None:
    """``manage.py reencrypt_secrets``'s step for one ``Authenticator`` (registered in
    apps/accounts/apps.py)."""
    row.data = reencrypt_authenticator_data(row.data)
