"""``require_sso``: who may still sign in with a password (docs/sso.md, "Requiring single sign-on").

A connection that requires single sign-on refuses password sign-in (the console's, and the API's
``POST /api/v1/auth/login``) to the members of its organization whose email domain it claims.

Break-glass: an **owner** of that organization keeps password sign-in **if their account has
two-factor authentication (TOTP) set up**, and then signs in with the password *and* a code. So an
outage of the identity provider, or a connection set up wrong, never locks the organization out of
its own settings, while a stolen owner password alone still opens nothing. Members, admins and
owners without two-factor are refused, with a message that points at single sign-on.
"""

from apps.accounts.two_factor import has_two_factor
from apps.organizations.models import Membership, Role

from .selectors import active_connection_for_domain


def email_domain(email: str) -> str:
    return email.rpartition("@")[2].strip().lower()


def password_sign_in_refusal(user) -> str | None:
    """Why ``user`` may not sign in with a password, or None when they may."""
    connection = active_connection_for_domain(email_domain(user.email))
    if connection is None or not connection.require_sso:
        return None
    membership = Membership.objects.filter(user=user, organization_id=connection.organization_id).first()
    if membership is None:
        return None
    if membership.role == Role.OWNER and has_two_factor(user):
        return None  # break-glass: the sign-in goes on to ask for the code
    return (
        f"{connection.organization.name} requires single sign-on: use “Sign in with SSO” with your "
        f"{email_domain(user.email)} address."
    )
