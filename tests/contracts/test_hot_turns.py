"""The stored turns' hot tier's contract (``apps.conversations.hot.HotTurns``): ``LocalTurns`` in the
embedded default and ``RedisTurns`` keep the same promises: a turn put is read back by its
organization and id only, until it expires or is deleted, and many are read at once."""

import uuid

import pytest

from apps.conversations.hot import HotTurns, LocalTurns, RedisTurns
from tests.proxy.conftest import FakeClock

from .conftest import IMPLEMENTATIONS, assert_conforms


@pytest.fixture(params=IMPLEMENTATIONS)
def turns(request):
    return LocalTurns() if request.param == "embedded" else RedisTurns()


def payload(organization_id: str, response_id: str, content: str = "sealed") -> dict:
    return {
        "organization_id": organization_id,
        "response_id": response_id,
        "native": False,
        "content": content,
    }


@pytest.mark.parametrize("implementation", [LocalTurns, RedisTurns])
def test_each_implementation_has_the_protocols_methods_and_signatures(implementation):
    assert_conforms(implementation, HotTurns)


async def test_a_turn_is_read_back_by_its_organization_and_id_only(turns):
    ours, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    first, second = f"resp_{uuid.uuid4().hex}", f"resp_{uuid.uuid4().hex}"
    await turns.put(payload(ours, first, "one"))
    await turns.put(payload(ours, second, "two"))

    found = await turns.get_many(ours, [first, second, "resp_unknown"])

    assert {response_id: turn["content"] for response_id, turn in found.items()} == {
        first: "one",
        second: "two",
    }
    assert await turns.get_many(theirs, [first, second]) == {}


async def test_a_deleted_turn_is_gone(turns):
    organization_id, response_id = str(uuid.uuid4()), f"resp_{uuid.uuid4().hex}"
    await turns.put(payload(organization_id, response_id))

    await turns.delete(organization_id, response_id)

    assert await turns.get_many(organization_id, [response_id]) == {}


async def test_a_turn_put_again_is_replaced(turns):
    organization_id, response_id = str(uuid.uuid4()), f"resp_{uuid.uuid4().hex}"
    await turns.put(payload(organization_id, response_id, "old"))
    await turns.put(payload(organization_id, response_id, "new"))

    assert (await turns.get_many(organization_id, [response_id]))[response_id]["content"] == "new"


async def test_the_embedded_tier_keeps_its_bound_and_its_time(settings):
    clock = FakeClock()
    turns = LocalTurns(clock)
    settings.GATEWAY_RESPONSES_HOT_BYTES = 1000
    organization_id = str(uuid.uuid4())
    for index in range(5):
        await turns.put(payload(organization_id, f"resp_{index}", "x" * 300))

    kept = await turns.get_many(organization_id, [f"resp_{index}" for index in range(5)])
    assert sorted(kept) == ["resp_3", "resp_4"]  # the oldest went first
    clock.now += settings.GATEWAY_RESPONSES_HOT_SECONDS + 1
    assert await turns.get_many(organization_id, ["resp_4"]) == {}
