"""The proxy's Redis client (apps/core/redis_pipelined.py) against a redis-server of the test's own:
it answers as redis-py does, shares one connection between every request in flight, and fails the
way callers expect when Redis refuses, hangs or restarts."""

import asyncio
import time

import pytest
import redis
from redis.exceptions import AuthenticationError, NoScriptError, ResponseError

from apps.core.redis_pipelined import PipelinedRedis
from tests.redis_process import RedisProcess
from tests.tcp_proxy import TcpProxy

TIMEOUT = 0.3
SCRIPT = "return {KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}"


@pytest.fixture
def server():
    process = RedisProcess().start()
    yield process
    process.close()


@pytest.fixture
def direct(server):
    """redis-py, to see what the client wrote (and to set things up behind its back)."""
    client = redis.Redis(port=server.port)
    yield client
    client.close()


def client_for(url: str) -> PipelinedRedis:
    return PipelinedRedis.from_url(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT)


@pytest.fixture
async def client(server):
    pipelined = client_for(server.url)
    yield pipelined
    await pipelined.aclose()


async def test_it_answers_each_command_as_redis_py_does(client, direct):
    assert await client.set("a", b"one") is True
    assert await client.set("b", "two", ex=100) is True
    assert await client.get("a") == b"one"
    assert await client.get("missing") is None
    assert await client.mget("a", "missing", "b") == [b"one", None, b"two"]
    assert await client.mget(["b", "a"]) == [b"two", b"one"]
    assert 90 < direct.ttl("b") <= 100
    assert await client.delete("a", "missing") == 1

    assert await client.eval(SCRIPT, 1, "k", "v", 41) == [b"k", b"v", 42]
    sha = await client.script_load(SCRIPT)
    assert sha == direct.script_load(SCRIPT)
    assert await client.evalsha(sha, 1, "k", "w", 1) == [b"k", b"w", 2]


async def test_redis_error_replies_fail_their_own_command_only(client, direct):
    direct.flushall()  # SCRIPT FLUSH as after a Redis restart: the script is unknown
    results = await asyncio.gather(
        client.set("a", 1),
        client.evalsha("0" * 40, 0),
        client.eval("return redis.call('INCR', KEYS[1])", 1, "a"),
        client.eval("this is not lua", 0),
        client.get("a"),
        return_exceptions=True,
    )

    assert results[0] is True
    assert isinstance(results[1], NoScriptError)
    assert results[2] == 2
    assert isinstance(results[3], ResponseError) and not isinstance(results[3], NoScriptError)
    assert results[4] == b"2"


async def test_every_request_in_flight_shares_one_connection(client, direct):
    before = direct.info("clients")["connected_clients"]  # this test's own redis-py connection

    values = await asyncio.gather(*(client.eval("return ARGV[1]", 0, str(n)) for n in range(500)))

    assert values == [str(n).encode() for n in range(500)]  # each reply went to its own command
    assert direct.info("clients")["connected_clients"] == before + 1


async def test_a_caller_that_leaves_does_not_shift_the_replies_of_the_others(client, direct):
    direct.set("slow", "yes")
    left = asyncio.ensure_future(client.get("slow"))
    others = [asyncio.ensure_future(client.eval("return ARGV[1]", 0, str(n))) for n in range(10)]
    left.cancel()

    assert await asyncio.gather(*others) == [str(n).encode() for n in range(10)]
    assert await client.get("slow") == b"yes"


async def test_the_database_and_password_of_the_url_are_used(server, direct):
    direct.config_set("requirepass", "s3cret pass")
    direct = redis.Redis(port=server.port, password="s3cret pass", db=3)
    pipelined = client_for(f"redis://:s3cret%20pass@127.0.0.1:{server.port}/3")
    wrong = client_for(f"redis://:wrong@127.0.0.1:{server.port}/3")
    try:
        await pipelined.set("in-three", "yes")
        assert direct.get("in-three") == b"yes"
        with pytest.raises(AuthenticationError) as refused:
            await wrong.get("in-three")
        assert "wrong" not in str(refused.value)  # never the password in an error
    finally:
        await pipelined.aclose()
        await wrong.aclose()
        direct.close()


async def test_nothing_listening_fails_at_once_with_a_connection_error(server):
    pipelined = client_for(server.url)
    server.stop()

    began = time.monotonic()
    with pytest.raises(redis.ConnectionError):
        await pipelined.get("anything")
    assert time.monotonic() - began < TIMEOUT


async def test_a_hanging_redis_fails_every_waiting_command_after_the_timeout_then_recovers(client, server):
    assert await client.set("a", "1")
    server.freeze()
    try:
        began = time.monotonic()
        results = await asyncio.gather(*(client.get("a") for _ in range(5)), return_exceptions=True)
        waited = time.monotonic() - began
    finally:
        server.thaw()

    assert all(isinstance(result, redis.TimeoutError) for result in results)
    assert TIMEOUT <= waited < TIMEOUT + 0.5
    assert await client.get("a") == b"1"  # on a new connection: no late reply answers it


async def test_after_redis_restarts_the_next_command_opens_a_new_connection(client, server):
    assert await client.set("a", "1")
    server.restart_empty()

    assert await client.get("a") is None  # answered by the new, empty server; no error
    assert await client.set("a", "2")
    assert await client.get("a") == b"2"


@pytest.fixture
async def behind_proxy(server):
    """A client whose connection goes through a TCP proxy the test can cut; the server thawed and
    the client closed whatever the test did."""
    with TcpProxy("127.0.0.1", server.port) as proxy:
        pipelined = client_for(f"redis://127.0.0.1:{proxy.port}/0")
        try:
            yield proxy, pipelined
        finally:
            server.thaw()
            await pipelined.aclose()


async def test_a_connection_lost_with_commands_waiting_fails_them_and_the_next_reconnects(
    server, behind_proxy
):
    proxy, pipelined = behind_proxy
    assert await pipelined.set("a", "1")
    server.freeze()  # the command below stays unanswered...
    waiting = asyncio.ensure_future(pipelined.get("a"))
    await asyncio.sleep(0.05)
    proxy.sever()  # ...when its connection is cut

    with pytest.raises(redis.ConnectionError):
        await waiting
    server.thaw()
    proxy.restore()
    assert await pipelined.get("a") == b"1"


async def test_the_database_of_a_query_string_is_used_as_redis_py_uses_it(server, direct):
    pipelined = client_for(f"redis://127.0.0.1:{server.port}?db=4")
    try:
        await pipelined.set("in-four", "yes")
        assert redis.Redis(port=server.port, db=4).get("in-four") == b"yes"
    finally:
        await pipelined.aclose()


async def test_a_connection_attempt_every_caller_left_is_not_replayed_to_the_next(server):
    """The cache gives up on Redis after 0.1 s: a connection attempt can outlive all its callers. Its
    failure is not handed to the next command, which tries again."""
    pipelined = client_for(f"redis://127.0.0.1:{server.port}/2")  # its SELECT is what hangs below
    server.freeze()
    try:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pipelined.get("a"), 0.05)
        await asyncio.sleep(TIMEOUT + 0.1)  # the attempt has failed by now, with no one waiting
    finally:
        server.thaw()
    try:
        assert await pipelined.get("a") is None
    finally:
        await pipelined.aclose()


def until_done(client: PipelinedRedis, reply: asyncio.Future, seconds: float = 2.0) -> None:
    """Reads what has arrived until ``reply`` is answered, never giving the event loop a turn."""
    deadline = time.monotonic() + seconds
    while not reply.done() and time.monotonic() < deadline:
        client.read_arrived()


async def test_a_command_sent_now_is_answered_from_the_socket_without_a_turn_of_the_loop(client, direct):
    direct.set("k", b"v")
    assert await client.get("k") == b"v"  # connected
    for command, expected in ((("GET", "k"), b"v"), (("MGET", "k", "missing"), [b"v", None])):
        reply = client.send_now(*command)  # nothing else in flight: written at once

        until_done(client, reply)

        assert reply.result() == expected
    assert await client.get("k") == b"v"  # the event loop reads the next replies as before


async def test_without_an_open_connection_nothing_is_sent_now(server):
    client = client_for(server.url)
    assert client.send_now("GET", "k") is None  # the caller uses execute, which connects
    client.read_arrived()  # nothing to read: does nothing
    assert await client.get("k") is None
    await client.aclose()


async def test_a_connection_cut_while_a_reply_sent_now_is_awaited_fails_it_and_the_next_reconnects(
    server, behind_proxy
):
    proxy, pipelined = behind_proxy
    assert await pipelined.set("a", "1")
    server.freeze()  # the command below stays unanswered...
    reply = pipelined.send_now("GET", "a")
    proxy.sever()  # ...when its connection is cut

    until_done(pipelined, reply)

    with pytest.raises(redis.ConnectionError):
        reply.result()
    server.thaw()
    proxy.restore()
    assert await pipelined.get("a") == b"1"
