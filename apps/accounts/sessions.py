"""What a console session (a Django session of the browser) remembers about its organization.

Kept here, below the console, so that sign-in (apps/accounts/adapter.py, after a single sign-on) can
pin a session without importing the console; apps/console/access.py reads the same keys.
"""

from django.http import HttpRequest

# The organization the session works in; the user's first one when it names none.
SESSION_ORGANIZATION = "console_organization_id"
# Set by a single sign-on: the session may work in that organization only. The identity provider of
# one organization vouches for nobody's access to another.
SESSION_PINNED_ORGANIZATION = "console_pinned_organization_id"


def pin_organization(request: HttpRequest, organization_id) -> None:
    """After a single sign-on through ``organization_id``'s connection: the session works in that
    organization and may not switch to another one the account belongs to."""
    request.session[SESSION_PINNED_ORGANIZATION] = str(organization_id)
    request.session[SESSION_ORGANIZATION] = str(organization_id)
