"""Calling the upstreams: one attempt after another until one answers, within the deadline.

Each attempt has its own time limits, apart from the request's deadline, so that a key that hangs
gives way to the next candidate within seconds (``GATEWAY_CONNECT_TIMEOUT_SECONDS``,
``GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS``, then ``GATEWAY_STREAM_IDLE_SECONDS`` between a stream's chunks).
The last attempt a request can make waits for its first byte as long as the deadline allows: nothing
could follow it, and a slow answer (a long one that is not streamed arrives whole) is still an answer.
A request with a single candidate retries it after a transient failure (5xx, connection error,
timeout), after a short backoff, within ``GATEWAY_MAX_ATTEMPTS``: one 500 from a newcomer's only key
is not a 502.

Failover happens on what a different key or provider can fix: connection errors, timeouts, 429,
5xx, 401/403 (the gateway's own key is refused), 404 (the deployment's model is not there) and
answers that break the provider's format. What the client's request caused (400, 413, 422) is
returned to it as the upstream said, without trying elsewhere. A redirect is never followed; it
is an upstream error like a 5xx. Every attempt is recorded, its detail in the audit entry and the
server log; the client learns the provider, the attempt count and the last failure's category, never
an upstream's address or words (they may quote the gateway's network or its key).
"""

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
from django.conf import settings

from apps.audit.records import Attempt, RequestRecord
from apps.core.errors import GatewayError
from apps.observability import tracing

from .adapters import SPEAK_MESSAGES, SPEAK_RESPONSES, adapter_for
from .adapters.base import (
    Adapter,
    Completion,
    StreamTranslator,
    Target,
    UpstreamProtocolError,
    UpstreamRequest,
)
from .answers import StreamOutcome
from .http import NestedTooDeeply
from .routing import Candidate, NoCandidate
from .runtime import runtime
from .scrubbing import scrub_error
from .upstream import post, send

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What of an upstream's error message the client, the audit entry and the server log get.
ERROR_MESSAGE_LIMIT = 2000
# Upstream statuses that the client's own request caused: returned, never retried elsewhere.
CLIENT_CAUSED = frozenset({400, 413, 422})

STREAM_CUT = "The upstream ended the stream before the answer was complete."


class UpstreamFailed(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_failed"


class UpstreamTimedOut(GatewayError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


class UpstreamRefusedRequest(GatewayError):
    """The upstream refused the request for a reason of the request's own (its 4xx)."""

    type = "invalid_request_error"
    code = "upstream_invalid_request"


def target_for(candidate: Candidate) -> Target:
    key = candidate.key
    return Target(
        provider=key.provider,
        provider_key_id=key.id,
        secret=key.secret,
        base_url=key.base_url,
        model=candidate.deployment.upstream_model,
        api_version=key.api_version,
        supports_stream_usage=key.supports_stream_usage,
        speaks_responses=key.provider in SPEAK_RESPONSES
        or (key.provider == "openai_compatible" and key.speaks_responses),
        speaks_messages=key.provider in SPEAK_MESSAGES,
    )


def _retry_after(headers) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value else None
    except ValueError:
        return None


@dataclass(slots=True)
class _Failure:
    outcome: str
    status: int | None
    message: str
    provider: str = ""

    @property
    def transient(self) -> bool:
        """What the same key may not do again a moment later: a 5xx, a dropped connection, a timeout."""
        if self.outcome in ("timeout", "connection_error"):
            return True
        return self.outcome == "upstream_error" and self.status is not None and self.status >= 500

    @property
    def category(self) -> str:
        """What the client is told about the failure: a fixed word, never the upstream's text."""
        if self.outcome != "upstream_error":
            return self.outcome
        if self.status is not None and 300 <= self.status < 400:
            return "redirect_refused"
        return f"upstream_status_{self.status}"


def _status_failure(adapter: Adapter, status: int, payload: bytes, headers) -> _Failure:
    if 300 <= status < 400:
        location = headers.get("location", "")[:300]
        return _Failure(
            "upstream_error", status, f"the upstream redirected (HTTP {status} to {location!r}); not followed"
        )
    return _Failure("upstream_error", status, adapter.error_message(status, payload))


class Forwarder:
    """Tries the planned candidates in order for one request, recording each attempt."""

    def __init__(
        self,
        record: RequestRecord,
        candidates: list[Candidate],
        started: float,
        *,
        retry: bool = True,
        client_caused: frozenset[int] = CLIENT_CAUSED,
    ) -> None:
        self.record = record
        self.candidates = candidates
        self.retry = retry  # False where a failure is better skipped at once (the L3 cache's embedding)
        # Statuses the client's request caused, raised to it: a 404 too where only one upstream can
        # know what the request names (a stored Response).
        self.client_caused = client_caused
        self.deadline = started + settings.GATEWAY_REQUEST_DEADLINE_SECONDS
        self.last_failure: _Failure | None = None
        self._next = 0  # the index of the next candidate
        self._made = 0  # attempts sent
        self._trials_missed = 0  # half-open keys another request was already trying
        self._retry: Candidate | None = None  # the single candidate, to try again after a backoff
        self._backoff_ms: float | None = None  # the wait before the attempt about to be made
        self._pending: Candidate | None = None  # the attempt under way, until its outcome is noted

    async def _next_attempt(self) -> tuple[Candidate, float, float] | None:
        """The next attempt: its candidate, the seconds left of the deadline and how long it may
        wait for its first byte; None when the attempts, the candidates or the deadline ran out."""
        limit = settings.GATEWAY_MAX_ATTEMPTS
        self._backoff_ms = None
        candidate, self._retry = self._retry, None
        if candidate is not None:
            if self._made >= limit:
                return None
            # Full jitter over a doubling step: clients that failed together do not return together.
            backoff = settings.GATEWAY_RETRY_BACKOFF_SECONDS * 2 ** (self._made - 1) * random.uniform(0.5, 1)
            if time.perf_counter() + backoff >= self.deadline:
                return None
            await asyncio.sleep(backoff)
            self._backoff_ms = round(backoff * 1000, 2)
        else:
            while candidate is None:
                if self._made >= limit or self._next >= len(self.candidates):
                    return None
                candidate = self.candidates[self._next]
                self._next += 1
                if candidate.trial and not runtime.breaker.claim_trial(candidate.key.id):
                    self._trials_missed += 1
                    candidate = None  # another request is trying this half-open key
        remaining = self.deadline - time.perf_counter()
        if remaining <= 0:
            return None
        self._made += 1
        single = len(self.candidates) == 1
        last = self._made >= limit or (not single and self._next >= len(self.candidates))
        first_byte = remaining if last else min(settings.GATEWAY_FIRST_BYTE_TIMEOUT_SECONDS, remaining)
        self._pending = candidate
        return candidate, remaining, first_byte

    def _abandoned(self) -> None:
        """The request ended mid-attempt without a verdict on the key (its client left, or an error
        before the answer): a half-open key it was trying is free for the next request's trial at
        once rather than after the deadline."""
        if self._pending is not None and self._pending.trial:
            runtime.breaker.end_trial(self._pending.key.id)

    def _after_failure(self, candidate: Candidate) -> None:
        """A single candidate that failed for a passing reason is tried again, unless its breaker
        has just opened (the breaker's word wins over a retry)."""
        failure = self.last_failure
        if (
            self.retry
            and len(self.candidates) == 1
            and failure is not None
            and failure.transient
            and runtime.breaker.is_available(candidate.key.id, runtime.breaker.clock())
        ):
            self._retry = candidate

    @staticmethod
    def _timeout(remaining: float, first_byte: float, *, stream: bool) -> aiohttp.ClientTimeout:
        connect = min(settings.GATEWAY_CONNECT_TIMEOUT_SECONDS, remaining)
        if stream:  # the first byte's limit is enforced around the first chunk; then an idle limit
            return aiohttp.ClientTimeout(
                total=None, sock_connect=connect, sock_read=settings.GATEWAY_STREAM_IDLE_SECONDS
            )
        # sock_read runs from the request sent to the response's headers (a whole answer's first
        # byte) and then between reads of its body.
        return aiohttp.ClientTimeout(total=remaining, sock_connect=connect, sock_read=first_byte)

    def _note(
        self, candidate: Candidate, status: int | None, outcome: str, began: float, error: str | None = None
    ):
        self._pending = None
        elapsed_ms = (time.perf_counter() - began) * 1000
        self.record.upstream_ms += elapsed_ms
        self.record.attempts.append(
            Attempt(
                provider=candidate.key.provider,
                provider_key_id=candidate.key.id,
                model=candidate.deployment.upstream_model,
                alias=candidate.alias,
                status=status,
                outcome=outcome,
                latency_ms=round(elapsed_ms, 2),
                error=error,
                trial=candidate.trial,
                backoff_ms=self._backoff_ms,
            )
        )

    def _chosen(self, candidate: Candidate) -> None:
        self.record.provider = candidate.key.provider
        self.record.provider_key_id = candidate.key.id
        self.record.model = candidate.deployment.upstream_model

    def _fail(
        self, candidate: Candidate, failure: _Failure, began: float, *, retry_after: float | None = None
    ):
        failure.message = scrub_error(failure.message, candidate.key.secret, ERROR_MESSAGE_LIMIT)
        failure.provider = candidate.key.provider
        self._note(candidate, failure.status, failure.outcome, began, failure.message)
        logger.warning(
            "Upstream attempt failed (request %s, %s key %s, %s, status %s): %s",
            self.record.request_id,
            candidate.key.provider,
            candidate.key.id,
            failure.outcome,
            failure.status,
            failure.message,
        )
        if self._backoff_ms is None or retry_after:
            # A retry's failure is the same incident as the one before it: the breaker counts
            # requests that failed on the key, so one request's retries alone never open it.
            runtime.breaker.record_failure(
                candidate.key.id, provider=candidate.key.provider, retry_after=retry_after
            )
        self.last_failure = failure
        self._after_failure(candidate)

    def _refused(self, candidate: Candidate, adapter: Adapter, status: int, payload: bytes, began: float):
        text = adapter.error_message(status, payload)
        message = scrub_error(text, candidate.key.secret, ERROR_MESSAGE_LIMIT)
        self._note(candidate, status, "client_error", began, message)
        self._chosen(candidate)
        runtime.breaker.record_success(candidate.key.id)  # the key works; the request was wrong
        return UpstreamRefusedRequest(f"The upstream refused the request: {message}", status=status)

    def exhausted(self) -> GatewayError:
        failure = self.last_failure
        tried = len(self.record.attempts)
        if not tried and self._trials_missed:
            # Every candidate was a half-open key that another request is trying at this moment.
            return NoCandidate(
                "Every upstream for this model is cooling down after repeated failures; retry shortly.",
                code="upstreams_cooling_down",
                headers={"retry-after": "1"},
            )
        if failure is not None and failure.outcome == "timeout":
            return UpstreamTimedOut(
                f"The upstream did not answer in time ({tried} attempt(s)).",
                headers={"x-should-retry": "false"},
            )
        detail = f"; the last, to {failure.provider}, ended in {failure.category}" if failure else ""
        return UpstreamFailed(
            f"Every upstream candidate failed after {tried} attempt(s){detail}.",
            headers={"x-should-retry": "false"},
        )

    async def complete(
        self,
        build: Callable[[Adapter, Target], UpstreamRequest],
        parse: Callable[[Adapter, Target, bytes], Completion],
    ) -> Completion:
        """A whole answer from the first candidate that gives one."""

        async def attempt(
            candidate: Candidate, adapter: Adapter, target: Target, upstream: UpstreamRequest, timing: _Timing
        ) -> Completion | None:
            try:
                async with send(
                    upstream.method,
                    upstream.url,
                    data=upstream.body,
                    headers=upstream.headers,
                    timeout=self._timeout(timing.remaining, timing.first_byte, stream=False),
                ) as response:
                    payload = await response.read()
                    status = response.status
                    upstream_headers = response.headers
            except TimeoutError as error:
                self._fail(candidate, _timed_out(error, timing.first_byte, before="its answer"), timing.began)
                return None
            except (aiohttp.ClientError, OSError) as error:
                self._fail(candidate, _Failure("connection_error", None, _describe(error)), timing.began)
                return None
            if not 200 <= status < 300:
                self._status_failed(candidate, adapter, status, payload, upstream_headers, timing.began)
                return None
            try:
                completion = parse(adapter, target, payload)
            except UpstreamProtocolError as error:
                self._fail(candidate, _Failure("invalid_response", status, str(error)), timing.began)
                return None
            self._succeeded(candidate, status, timing.began)
            return completion

        return await self._first_answer(build, attempt)

    async def open_stream(
        self,
        build: Callable[[Adapter, Target], UpstreamRequest],
        translator_for: Callable[[Adapter, Target], StreamTranslator],
    ) -> "OpenStream":
        """A stream from the first candidate that sends a first chunk; failures before it fail over.
        ``translator_for`` makes what turns the chosen upstream's events into the client's frames."""

        async def attempt(
            candidate: Candidate, adapter: Adapter, target: Target, upstream: UpstreamRequest, timing: _Timing
        ) -> OpenStream | None:
            response: aiohttp.ClientResponse | None = None
            try:
                async with asyncio.timeout(timing.first_byte):
                    response = await post(
                        upstream.url,
                        data=upstream.body,
                        headers=upstream.headers,
                        timeout=self._timeout(timing.remaining, timing.first_byte, stream=True),
                    )
                    status = response.status
                    if not 200 <= status < 300:
                        payload = await response.read()
                        response.release()
                        self._status_failed(
                            candidate, adapter, status, payload, response.headers, timing.began
                        )
                        return None
                    translator = translator_for(adapter, target)
                    events = sse_events(response.content)
                    first = await _first_frames(events, translator)
            except TimeoutError as error:
                _close(response)
                failure = _timed_out(error, timing.first_byte, before="its first chunk")
                self._fail(candidate, failure, timing.began)
                return None
            except (aiohttp.ClientError, OSError, UpstreamProtocolError) as error:
                _close(response)
                outcome = (
                    "invalid_response" if isinstance(error, UpstreamProtocolError) else "connection_error"
                )
                self._fail(candidate, _Failure(outcome, None, _describe(error)), timing.began)
                return None
            except BaseException:
                _close(response)
                raise
            self._succeeded(candidate, status, timing.began)
            return OpenStream(response=response, events=events, translator=translator, first=first)

        return await self._first_answer(build, attempt)

    async def _first_answer(
        self,
        build: Callable[[Adapter, Target], UpstreamRequest],
        attempt: Callable[[Candidate, Adapter, Target, UpstreamRequest, "_Timing"], Awaitable[T | None]],
    ) -> T:
        """The failover loop of both kinds of answer: each planned attempt in turn until one gives its
        answer (``attempt`` returns it) or refuses the request (raises); ``attempt`` notes a failure
        and returns None, and the next one is tried."""
        try:
            while (planned := await self._next_attempt()) is not None:
                candidate, remaining, first_byte = planned
                adapter = adapter_for(candidate.key.provider)
                target = target_for(candidate)
                upstream = _build(build, adapter, target)
                span = None
                if tracing.enabled:
                    span = tracing.guarded(
                        tracing.start_attempt,
                        self.record,
                        candidate.key.provider,
                        candidate.deployment.upstream_model,
                        upstream.headers,
                    )
                tried = len(self.record.attempts)
                try:
                    answer = await attempt(
                        candidate,
                        adapter,
                        target,
                        upstream,
                        _Timing(remaining, first_byte, time.perf_counter()),
                    )
                finally:
                    if span is not None:
                        attempts = self.record.attempts
                        outcome = attempts[-1] if len(attempts) > tried else None
                        tracing.guarded(tracing.end_attempt, span, outcome)
                if answer is not None:
                    return answer
            raise self.exhausted()
        except BaseException:  # cancelled, or an error before the attempt's verdict (a body too deep)
            self._abandoned()
            raise

    def _succeeded(self, candidate: Candidate, status: int, began: float) -> None:
        self._note(candidate, status, "ok", began)
        self._chosen(candidate)
        runtime.breaker.record_success(candidate.key.id)

    def _status_failed(
        self,
        candidate: Candidate,
        adapter: Adapter,
        status: int,
        payload: bytes,
        headers: Mapping[str, str],
        began: float,
    ) -> None:
        """An answer that is not a 2xx: the client's own fault is raised to it (no failover), anything
        else is a failure of this attempt."""
        if status in self.client_caused:
            raise self._refused(candidate, adapter, status, payload, began)
        retry_after = _retry_after(headers) if status == 429 else None
        failure = _status_failure(adapter, status, payload, headers)
        self._fail(candidate, failure, began, retry_after=retry_after)


@dataclass(frozen=True, slots=True)
class _Timing:
    """One attempt's time: seconds left of the deadline, the wait allowed for its first byte, and
    when it began (``time.perf_counter``)."""

    remaining: float
    first_byte: float
    began: float


@dataclass(slots=True)
class OpenStream:
    response: aiohttp.ClientResponse
    events: AsyncIterator[tuple[str, str]]
    translator: StreamTranslator
    first: list[bytes]  # what the client gets first (the headers go out with it)

    def close(self) -> None:
        _close(self.response)

    async def frames(self, outcome: StreamOutcome) -> AsyncIterator[bytes]:
        """The client's frames as the upstream's events arrive, translated; how the stream ended
        goes in ``outcome`` (a cut or a dropped connection is a failure, never an exception)."""
        translator = self.translator
        try:
            for frame in self.first:
                yield frame
            async for event, data in self.events:
                for frame in translator.feed(event, data):
                    yield frame
                if translator.finished:
                    break
            if translator.error is not None:
                # The upstream's own error event has reached the client.
                outcome.failure, outcome.failure_sent = translator.error, True
            elif not translator.finished:
                outcome.failure = STREAM_CUT
        except (aiohttp.ClientError, OSError, TimeoutError, UpstreamProtocolError) as error:
            outcome.failure = f"{STREAM_CUT} ({type(error).__name__})"
        finally:
            self.close()
            outcome.usage, outcome.output_chars = translator.usage, translator.output_chars
            outcome.sequence = translator.sequence


async def _first_frames(events: AsyncIterator[tuple[str, str]], translator: StreamTranslator) -> list[bytes]:
    async for event, data in events:
        frames = translator.feed(event, data)
        if translator.error is not None:
            # Nothing has reached the client yet: an error now (overloaded ...) can still fail over.
            raise UpstreamProtocolError(f"the upstream's stream began with an error: {translator.error}")
        if frames:
            return frames
        if translator.finished:
            break
    raise UpstreamProtocolError("the upstream's stream ended before its first chunk")


async def sse_events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events as (event name, data): lines up to a blank one; comments skipped."""
    event = ""
    data: list[str] = []
    async for raw in content:
        line = raw.rstrip(b"\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
            continue
        if line[:1] == b":":
            continue
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value.decode("utf-8", errors="replace"))
        elif name == b"event":
            event = value.decode("utf-8", errors="replace")
    if data:
        # The upstream closed the connection without ending its last event: it was cut short.
        raise UpstreamProtocolError("the upstream's stream ended in the middle of an event")


def _build(build: Callable[[Adapter, Target], UpstreamRequest], adapter: Adapter, target: Target):
    try:
        return build(adapter, target)
    except RecursionError:
        # A body just under the parser's limit can still be too deep to encode again for the upstream.
        raise NestedTooDeeply() from None


def _timed_out(error: TimeoutError, first_byte: float, *, before: str) -> _Failure:
    if isinstance(error, aiohttp.ConnectionTimeoutError):
        message = f"no connection within {settings.GATEWAY_CONNECT_TIMEOUT_SECONDS:g} s"
    else:
        message = f"nothing received within {first_byte:.3g} s, before {before}"
    return _Failure("timeout", None, f"the upstream timed out: {message}")


def _close(response: aiohttp.ClientResponse | None) -> None:
    if response is not None:
        response.close()


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]
