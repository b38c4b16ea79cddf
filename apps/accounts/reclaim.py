"""What an account holds in the apps above accounts, that reclaiming it ends (``account_reclaim`` in
apps/accounts/services.py).

An app whose rows grant an account something (an organization's membership, a team's) registers the
function that ends them in its ``AppConfig.ready``: every process runs it, and accounts need not
import the apps that build on it::

    reclaim.register(account_memberships_end)

Each runs inside the reclaim's transaction, with the account's row locked, in the order the apps
register (``INSTALLED_APPS``).
"""

from collections.abc import Callable

from .models import User

Release = Callable[[User], None]

releases: list[Release] = []


def register(release: Release) -> None:
    if release not in releases:  # ready() may run more than once in a test process
        releases.append(release)
