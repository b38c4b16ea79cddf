"""Key revocation's contract (``apps.keys.revocation.Revocation``) and the configuration
generations' (``apps.core.generations.Generations``), read by the same check: the embedded
implementations and the Redis ones mark, report and move the generation alike."""

import asyncio
import uuid

import pytest

from apps.core import generations as generations_module
from apps.core.generations import (
    Generations,
    LocalGenerations,
    RedisGenerations,
    bump_generation,
    generation_key,
)
from apps.core.redis import sync_client
from apps.core.revocation_marks import marker
from apps.keys import revocation as revocation_module
from apps.keys.revocation import LocalRevocation, RedisRevocation, Revocation

from .conftest import IMPLEMENTATIONS, assert_conforms


@pytest.fixture(params=IMPLEMENTATIONS)
def home(request):
    """(revocation, generations) of one implementation, and the ids it was used with."""
    used = {"keys": [], "organizations": []}
    if request.param == "embedded":
        yield LocalRevocation(), LocalGenerations(), used
        return
    yield RedisRevocation(), RedisGenerations(), used
    client = sync_client()
    for key_id in used["keys"]:
        client.delete(marker(key_id))
    for organization_id in used["organizations"]:
        client.delete(generation_key(organization_id))


def ids(used, keys: int = 0, organizations: int = 0):
    made_keys = [str(uuid.uuid4()) for _ in range(keys)]
    made_organizations = [str(uuid.uuid4()) for _ in range(organizations)]
    used["keys"] += made_keys
    used["organizations"] += made_organizations
    return made_keys, made_organizations


@pytest.mark.parametrize("implementation", [LocalRevocation, RedisRevocation])
def test_each_revocation_has_the_protocols_methods_and_signatures(implementation):
    assert_conforms(implementation, Revocation)


@pytest.mark.parametrize("implementation", [LocalGenerations, RedisGenerations])
def test_each_generations_has_the_protocols_methods_and_signatures(implementation):
    assert_conforms(implementation, Generations)


async def test_a_marked_key_is_revoked_and_no_other(home):
    revocation, _, used = home
    (revoked, kept), (organization_id,) = ids(used, keys=2, organizations=1)
    assert (await revocation.check(revoked, organization_id))[0] is False
    revocation.mark(revoked)
    assert (await revocation.check(revoked, organization_id))[0] is True
    assert (await revocation.check(kept, organization_id))[0] is False


async def test_marking_a_key_twice_keeps_it_revoked(home):
    revocation, _, used = home
    (key_id,), (organization_id,) = ids(used, keys=1, organizations=1)
    revocation.mark(key_id)
    revocation.mark(key_id)
    assert (await revocation.check(key_id, organization_id))[0] is True


async def test_the_generation_stays_until_a_bump_changes_it_for_that_organization_only(home):
    revocation, generations, used = home
    (key_id,), (organization_id, other_id) = ids(used, keys=1, organizations=2)
    first = (await revocation.check(key_id, organization_id))[1]
    other = (await revocation.check(key_id, other_id))[1]
    assert isinstance(first, int)
    assert (await revocation.check(key_id, organization_id))[1] == first
    generations.bump(organization_id)
    bumped = (await revocation.check(key_id, organization_id))[1]
    assert bumped != first
    assert (await revocation.check(key_id, organization_id))[1] == bumped
    assert (await revocation.check(key_id, other_id))[1] == other


async def test_a_revoked_key_still_reports_the_generation(home):
    revocation, _, used = home
    (key_id, other_key), (organization_id,) = ids(used, keys=2, organizations=1)
    generation = (await revocation.check(other_key, organization_id))[1]
    revocation.mark(key_id)
    assert await revocation.check(key_id, organization_id) == (True, generation)


@pytest.mark.django_db
def test_bump_generation_moves_it_once_the_transaction_commits(
    home, monkeypatch, django_capture_on_commit_callbacks
):
    """``bump_generation``, what the services call, goes through the deployment's generations."""
    revocation, generations, used = home
    (key_id,), (organization_id,) = ids(used, keys=1, organizations=1)
    monkeypatch.setattr(generations_module, "generations", lambda: generations)

    def generation() -> int | None:
        return asyncio.run(revocation.check(key_id, organization_id))[1]

    before = generation()
    with django_capture_on_commit_callbacks() as callbacks:
        bump_generation(organization_id)
        assert generation() == before  # not committed yet
    for callback in callbacks:
        callback()
    assert generation() != before


def test_the_deployment_chooses_once_by_redis_url(settings):
    settings.REDIS_URL = ""
    assert revocation_module.revocations() is revocation_module.local_revocation
    assert generations_module.generations() is generations_module.local_generations
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert revocation_module.revocations() is revocation_module.redis_revocation
    assert generations_module.generations() is generations_module.redis_generations
