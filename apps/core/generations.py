"""A per-organization counter that says "this organization's routing configuration changed".

Proxy workers hold each organization's provider keys, catalog and teams in memory. Every change
(a rotation, a new deployment, a team's regions ...) bumps the counter after its transaction
commits; a worker compares the counter with the one its copy was built from on every request
(read together with the revocation marker, in the same Redis round trip) and rebuilds the copy
when they differ. So a rotated provider key is never used for a request that starts after the
rotation committed, on any worker.

Without Redis the counter lives in this process, which is the only server process of the
embedded default.
"""

from collections import defaultdict

from django.db import transaction

from apps.core.redis import redis_key, sync_client

_local: defaultdict[str, int] = defaultdict(int)


def generation_key(organization_id: str) -> str:
    return redis_key("config-generation", str(organization_id))


def local_generation(organization_id: str) -> int:
    return _local[str(organization_id)]


def bump_generation(organization_id) -> None:
    """Schedules the bump for when the surrounding transaction commits (at once outside one)."""
    organization_id = str(organization_id)

    def bump() -> None:
        _local[organization_id] += 1
        client = sync_client()
        if client is not None:
            client.incr(generation_key(organization_id))

    transaction.on_commit(bump)
