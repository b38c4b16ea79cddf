"""What a member leaves with their organization, registered by the apps above organizations.

A member removed from an organization (``membership_remove``) leaves what the organization's apps
granted them there (its teams); a reclaimed account (``account_memberships_end``) leaves it in every
organization. An app that grants something to members registers the function that ends it in its
``AppConfig.ready``, which every process runs, so organizations need not import it::

    departures.register(team_memberships_end)

Each is called with the account's id and the organization's (None: every organization), inside the
removal's transaction, before the membership itself is deleted.
"""

import uuid
from collections.abc import Callable

Departure = Callable[..., None]  # (*, user_id, organization_id: uuid.UUID | None) -> None

departures: list[Departure] = []


def register(departure: Departure) -> None:
    if departure not in departures:  # ready() may run more than once in a test process
        departures.append(departure)


def depart(*, user_id, organization_id: uuid.UUID | None) -> None:
    for departure in departures:
        departure(user_id=user_id, organization_id=organization_id)
