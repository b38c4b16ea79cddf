"""PostgreSQL cut under the proxy (issue 20, section 2): an organization's configuration is served
from the last good copy for GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS, never a 500; a 503 in OpenAI's
shape when there is no usable copy. The cut is a real one (tests/tcp_proxy.py)."""

import asyncio

import pytest
from django.db import connection

from apps.proxy.config import RETRY_DATABASE_SECONDS
from apps.proxy.runtime import runtime
from tests.proxy.conftest import FakeClock, bearer
from tests.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="cuts a PostgreSQL connection"),
]

CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def database_cut():
    """The test's database connections go through a TCP proxy the test can sever (a fresh pool, with
    a one-second wait for a connection, so the first failure is quick)."""
    db = connection.settings_dict
    saved = {name: db[name] for name in ("HOST", "PORT")}
    saved_pool = db["OPTIONS"].get("pool")
    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        connection.close_pool()
        db["HOST"], db["PORT"] = "127.0.0.1", cut.port
        db["OPTIONS"]["pool"] = {**saved_pool, "timeout": 1}
        try:
            yield cut
        finally:
            cut.restore()
            connection.close_pool()
            db.update(saved)
            db["OPTIONS"]["pool"] = saved_pool
            connection.close_pool()


@pytest.fixture
def clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(runtime.configs, "clock", clock)
    return clock


@pytest.fixture
def loads(monkeypatch):
    seen = Loads()
    read = runtime.configs.load

    async def counted(organization_id: str, generation: int):
        seen.append(organization_id)
        seen.tasks.append(asyncio.current_task())
        return await read(organization_id, generation)

    monkeypatch.setattr(runtime.configs, "load", counted)
    return seen


class Loads(list):
    """The organizations whose configuration was read, in order; ``tasks`` are the reads."""

    tasks: list

    def __init__(self) -> None:
        super().__init__()
        self.tasks = []

    async def finished(self) -> None:
        """Every read so far has ended (a probe runs in the background: nobody awaits it)."""
        await asyncio.gather(*self.tasks, return_exceptions=True)


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "configuration_unavailable"
    assert error["type"] == "service_unavailable_error"
    assert response.headers["retry-after"] == "5"


async def test_the_last_good_configuration_is_served_while_the_database_is_cut(
    proxy, routed, gateway_key, database_cut, clock, loads, settings
):
    headers = bearer(gateway_key[1])
    assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert len(loads) == 1

    database_cut.sever()
    clock.now += settings.GATEWAY_CONFIG_MAX_AGE_SECONDS + 1  # the copy is due to be read again
    for _ in range(5):
        response = await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)
        assert response.status_code == 200, response.text
    # One read met the cut; the next requests did not try the database again meanwhile.
    assert len(loads) == 2

    clock.now += RETRY_DATABASE_SECONDS  # one read tries again, in the background
    assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert len(loads) == 3
    await loads.finished()  # the probe met the cut

    database_cut.restore()
    clock.now += RETRY_DATABASE_SECONDS
    assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert len(loads) == 4  # read again once the database answers, and held


async def test_past_the_bound_or_without_a_copy_the_answer_is_a_503_in_openais_shape(
    proxy, routed, gateway_key, database_cut, clock, settings
):
    headers = bearer(gateway_key[1])
    assert (await proxy.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200

    database_cut.sever()
    clock.now += settings.GATEWAY_CONFIG_OUTAGE_MAX_AGE_SECONDS  # the last good copy is too old now
    assert_unavailable(await proxy.post("/v1/chat/completions", json=CHAT, headers=headers))

    runtime.configs.clear()  # a worker that holds the key but never read the configuration
    assert_unavailable(await proxy.post("/v1/chat/completions", json=CHAT, headers=headers))
