"""``require_sso``: where an account may still sign in with a password (docs/sso.md, "Requiring
single sign-on").

A connection that requires single sign-on refuses password sessions **in its own organization** (the
console's, and the API's ``POST /api/v1/auth/login``) to its members whose email domain the
connection claims, and only once the organization has proved that domain (``SsoDomain``). A password
sign-in into another organization the account belongs to goes on: one organization's rule says
nothing about another's sessions, and an unproved claim says nothing at all.

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


def password_refusals(user) -> dict[str, str]:
    """The organizations of ``user`` (id as a string) whose password sessions single sign-on refuses,
    each with the reason to show; empty when the password opens every one of them. At most one: a
    domain is proved by one organization."""
    connection = active_connection_for_domain(email_domain(user.email))
    if connection is None or not connection.require_sso:
        return {}
    membership = Membership.objects.filter(user=user, organization_id=connection.organization_id).first()
    if membership is None:
        return {}
    if membership.role == Role.OWNER and has_two_factor(user):
        return {}  # break-glass: the sign-in goes on to ask for the code
    message = (
        f"{connection.organization.name} requires single sign-on: use “Sign in with SSO” with your "
        f"{email_domain(user.email)} address."
    )
    return {str(connection.organization_id): message}


def password_sign_in_refusal(user) -> str | None:
    """Why ``user`` may not sign in with a password at all (every organization they belong to refuses
    it), or None when at least one of them takes it."""
    refusals = password_refusals(user)
    if not refusals:
        return None
    organization_ids = {
        str(pk) for pk in Membership.objects.filter(user=user).values_list("organization_id", flat=True)
    }
    if organization_ids - set(refusals):
        return None
    return next(iter(refusals.values()))
