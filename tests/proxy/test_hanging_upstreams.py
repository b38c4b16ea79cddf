"""A hanging, resetting or failing upstream key (issue 20, section 3): per-attempt time limits fail
over within seconds, a half-open key gets one trial request, and a single candidate is retried.

Every fault is the loopback upstream's own (tests/upstreams.py); the limits are set short so the
tests wait for the gateway's limits, never for a sleep of their own."""

import asyncio
import time

import openai
import pytest

from apps.proxy.runtime import runtime
from tests.proxy.conftest import FakeClock, add_alias_async, add_provider_key_async, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
ANSWER = "Hello from upstream: hi"


@pytest.fixture
def clock():
    fake = FakeClock()
    real, runtime.breaker.clock = runtime.breaker.clock, fake
    yield fake
    runtime.breaker.clock = real


@pytest.fixture
def short_limits(settings):
    # A deadline long enough for a failover, short enough that the old "one attempt takes the whole
    # deadline" fails the test in seconds; a first-byte limit far below it.
    settings.GATEWAY_REQUEST_DEADLINE_SECONDS = 4
    settings.GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS = 0.5
    settings.GATEWAY_CONNECT_TIMEOUT_SECONDS = 0.5
    settings.GATEWAY_STREAM_IDLE_SECONDS = 0.5
    settings.GATEWAY_RETRY_BACKOFF_SECONDS = 0.01
    return settings


async def two_keys(organization, upstream):
    """A "hanging" key that rotation picks first (weight 10) and a "healthy" one."""
    await add_provider_key_async(organization, upstream, secret="hanging", weight=10)
    await add_provider_key_async(organization, upstream, secret="healthy", weight=1)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))


async def test_a_key_that_hangs_before_its_headers_fails_over_within_the_first_byte_limit(
    sdk, organization, upstream, records, short_limits
):
    await two_keys(organization, upstream)
    upstream.behave("timeout", seconds=60, for_credential="hanging")

    began = time.perf_counter()
    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)
    took = time.perf_counter() - began

    assert completion.choices[0].message.content == ANSWER
    assert took < 3  # the first-byte limit (0.5 s), not the request's deadline (4 s)
    [record] = records
    assert [(a.outcome, a.status) for a in record.attempts] == [("timeout", None), ("ok", 200)]
    assert 400 <= record.attempts[0].latency_ms < 2000
    assert "nothing received within 0.5 s" in record.attempts[0].error


async def test_a_stream_whose_key_hangs_before_its_headers_fails_over_within_the_first_byte_limit(
    sdk, organization, upstream, records, short_limits
):
    short_limits.GATEWAY_STREAM_IDLE_SECONDS = 30  # only the first-byte limit may cut the wait
    await two_keys(organization, upstream)
    upstream.behave("timeout", seconds=60, for_credential="hanging")

    began = time.perf_counter()
    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    assert text == ANSWER
    assert time.perf_counter() - began < 3
    [record] = records
    assert [a.outcome for a in record.attempts] == ["timeout", "ok"]
    assert record.stream_completed is True


async def test_the_last_possible_attempt_waits_for_a_slow_answer_within_the_deadline(
    sdk, organization, upstream, records, short_limits
):
    """A whole answer arrives only once generated: with nothing left to fail over to, a slow one
    (longer than the first-byte limit, within the deadline) is still an answer, not a 504."""
    short_limits.GATEWAY_MAX_ATTEMPTS = 1
    await add_provider_key_async(organization, upstream, secret="slow")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("slow", delay=1.0)

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert completion.choices[0].message.content == ANSWER
    assert [a.outcome for a in records[0].attempts] == ["ok"]


async def test_a_key_that_resets_the_connection_fails_over(
    sdk, organization, upstream, records, short_limits
):
    await two_keys(organization, upstream)
    upstream.behave("reset", for_credential="hanging")

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert completion.choices[0].message.content == ANSWER
    assert [a.outcome for a in records[0].attempts] == ["connection_error", "ok"]


async def test_a_stream_that_stalls_midway_ends_with_an_error_event_after_the_idle_limit(
    sdk, organization, upstream, records, short_limits
):
    await add_provider_key_async(organization, upstream, secret="stalling")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("stall", after=1, seconds=60)

    began = time.perf_counter()
    stream = await sdk.chat.completions.create(model="fast", messages=HELLO, stream=True)
    received = []
    with pytest.raises(openai.APIError) as raised:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    assert time.perf_counter() - began < 3  # the idle limit (0.5 s), not the upstream's 60 s
    assert "ended the stream" in raised.value.message
    assert "".join(received) == "Hello"
    [record] = records
    assert record.error_code == "stream_interrupted"
    assert record.stream_completed is False
    assert len(upstream.requests) == 1  # a started stream cannot change upstream


async def test_a_half_open_key_gets_one_trial_request_while_the_others_keep_to_healthy_keys(
    sdk, organization, upstream, records, short_limits, clock
):
    short_limits.GATEWAY_BREAKER_FAILURES = 1
    short_limits.GATEWAY_BREAKER_COOLDOWN_SECONDS = 30
    short_limits.GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS = 2  # the trial hangs while the others pass
    await two_keys(organization, upstream)
    upstream.behave("status", status=500, for_credential="hanging", times=1)
    await sdk.chat.completions.create(model="fast", messages=HELLO)  # opens the hanging key's breaker
    clock.now += 31  # the cooldown is over: half-open
    upstream.reset()
    upstream.behave("timeout", seconds=60, for_credential="hanging")
    records.clear()

    trial = asyncio.create_task(sdk.chat.completions.create(model="fast", messages=HELLO))
    assert await asyncio.to_thread(upstream.wait_for_requests, 1)  # the trial is hanging upstream
    others = await asyncio.gather(
        *(sdk.chat.completions.create(model="fast", messages=HELLO) for _ in range(7))
    )
    answered = await trial

    assert all(c.choices[0].message.content == ANSWER for c in [answered, *others])
    assert [r.credential for r in upstream.requests].count("hanging") == 1
    trial_record = next(r for r in records if len(r.attempts) == 2)
    assert [(a.outcome, a.trial) for a in trial_record.attempts] == [("timeout", True), ("ok", False)]
    assert all([a.outcome for a in r.attempts] == ["ok"] for r in records if r is not trial_record)

    # The failed trial opened the breaker again: until the next cooldown ends, nobody tries the key.
    await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert [r.credential for r in upstream.requests].count("hanging") == 1

    clock.now += 31
    upstream.reset()  # the key has recovered: the next trial closes the breaker
    for _ in range(3):
        await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert [r.credential for r in upstream.requests] == ["hanging", "hanging", "hanging"]


async def test_while_the_only_key_is_on_trial_other_requests_are_told_to_retry_shortly(
    sdk, organization, upstream, short_limits, clock
):
    short_limits.GATEWAY_BREAKER_FAILURES = 1
    short_limits.GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS = 2
    short_limits.GATEWAY_MAX_ATTEMPTS = 2
    await add_provider_key_async(organization, upstream, secret="only")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=500, times=1)
    with pytest.raises(openai.InternalServerError):
        # The breaker opens on this one failure, and its word wins over a retry.
        await sdk.chat.completions.create(model="fast", messages=HELLO)
    assert len(upstream.requests) == 1
    upstream.reset()

    clock.now += 31
    upstream.behave("timeout", seconds=60)
    trial = asyncio.create_task(sdk.chat.completions.create(model="fast", messages=HELLO))
    assert await asyncio.to_thread(upstream.wait_for_requests, 1)

    with pytest.raises(openai.InternalServerError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 503
    assert raised.value.body["code"] == "upstreams_cooling_down"
    assert raised.value.response.headers["retry-after"] == "1"
    assert len(upstream.requests) == 1
    trial.cancel()
    with pytest.raises((asyncio.CancelledError, openai.APIError)):
        await trial


@pytest.mark.parametrize(
    ("mode", "options", "outcome", "status"),
    [
        ("status", {"status": 500}, "upstream_error", 500),
        ("status", {"status": 503}, "upstream_error", 503),
        ("reset", {}, "connection_error", None),
        ("drop_connection", {}, "connection_error", None),
        ("timeout", {"seconds": 60}, "timeout", None),
    ],
)
async def test_a_single_candidate_is_retried_after_a_transient_failure(
    sdk, organization, upstream, records, short_limits, mode, options, outcome, status
):
    key = await add_provider_key_async(organization, upstream, secret="only")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave(mode, times=1, **options)

    completion = await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert completion.choices[0].message.content == ANSWER
    assert [r.credential for r in upstream.requests] == ["only", "only"]
    [entry] = await entries()
    first, retry = entry.attempts
    assert (first["provider_key_id"], first["outcome"], first["status"]) == (str(key.id), outcome, status)
    assert first["backoff_ms"] is None
    assert (retry["provider_key_id"], retry["outcome"], retry["status"]) == (str(key.id), "ok", 200)
    assert 0 < retry["backoff_ms"] <= 10  # the audit entry says it was a retry, and after what wait


async def test_a_single_candidate_is_retried_only_within_the_attempt_limit(
    sdk, organization, upstream, records, short_limits
):
    short_limits.GATEWAY_MAX_ATTEMPTS = 3
    short_limits.GATEWAY_BREAKER_FAILURES = 10
    await add_provider_key_async(organization, upstream, secret="only")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=500)

    with pytest.raises(openai.InternalServerError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 502
    assert len(upstream.requests) == 3
    backoffs = [a.backoff_ms for a in records[0].attempts]
    assert backoffs[0] is None and 0 < backoffs[1] <= 10 and 0 < backoffs[2] <= 20  # doubling


@pytest.mark.parametrize("status", [401, 404, 429])
async def test_a_single_candidate_is_not_retried_after_what_the_same_key_would_repeat(
    sdk, organization, upstream, short_limits, status
):
    await add_provider_key_async(organization, upstream, secret="only")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("status", status=status, times=1)

    with pytest.raises(openai.APIStatusError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 502
    assert len(upstream.requests) == 1


async def test_an_outsiders_keys_are_never_tried_on_failover_or_retry(
    sdk, organization, outsider, upstream, records, short_limits
):
    await add_provider_key_async(organization, upstream, secret="mine")
    await add_provider_key_async(outsider.organization, upstream, secret="theirs")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(outsider.organization, "fast", ("openai", "gpt-4o-mini"))
    upstream.behave("timeout", seconds=60, for_credential="mine")

    with pytest.raises(openai.APIStatusError) as raised:
        await sdk.chat.completions.create(model="fast", messages=HELLO)

    assert raised.value.status_code == 504
    assert {r.credential for r in upstream.requests} == {"mine"}
    assert len(records[0].attempts) == 3
