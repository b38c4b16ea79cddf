"""Calling the upstreams: one attempt after another until one answers, within the deadline.

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
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from django.conf import settings

from apps.audit.records import Attempt, RequestRecord
from apps.core.errors import GatewayError

from .adapters import adapter_for
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
from .routing import Candidate, breaker
from .scrubbing import scrub_error
from .upstream import post

logger = logging.getLogger(__name__)

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

    def __init__(self, record: RequestRecord, candidates: list[Candidate], started: float) -> None:
        self.record = record
        self.candidates = candidates
        self.deadline = started + settings.GATEWAY_REQUEST_DEADLINE_SECONDS
        self.last_failure: _Failure | None = None

    def _timeout(self, remaining: float, *, stream: bool) -> aiohttp.ClientTimeout:
        connect = min(settings.GATEWAY_CONNECT_TIMEOUT_SECONDS, remaining)
        if stream:  # the deadline up to the first chunk is enforced around it; then an idle limit
            return aiohttp.ClientTimeout(
                total=None, sock_connect=connect, sock_read=settings.GATEWAY_STREAM_IDLE_SECONDS
            )
        return aiohttp.ClientTimeout(total=remaining, sock_connect=connect)

    def _note(
        self, candidate: Candidate, status: int | None, outcome: str, began: float, error: str | None = None
    ):
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
        breaker.record_failure(candidate.key.id, retry_after=retry_after)
        self.last_failure = failure

    def _refused(self, candidate: Candidate, adapter: Adapter, status: int, payload: bytes, began: float):
        text = adapter.error_message(status, payload)
        message = scrub_error(text, candidate.key.secret, ERROR_MESSAGE_LIMIT)
        self._note(candidate, status, "client_error", began, message)
        self._chosen(candidate)
        breaker.record_success(candidate.key.id)  # the key works; the request was wrong
        return UpstreamRefusedRequest(f"The upstream refused the request: {message}", status=status)

    def exhausted(self) -> GatewayError:
        failure = self.last_failure
        tried = len(self.record.attempts)
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
        for candidate in self.candidates:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                break
            adapter = adapter_for(candidate.key.provider)
            target = target_for(candidate)
            upstream_request = _build(build, adapter, target)
            began = time.perf_counter()
            try:
                async with post(
                    upstream_request.url,
                    data=upstream_request.body,
                    headers=upstream_request.headers,
                    timeout=self._timeout(remaining, stream=False),
                ) as response:
                    payload = await response.read()
                    status = response.status
                    upstream_headers = response.headers
            except TimeoutError:
                self._fail(candidate, _Failure("timeout", None, "the upstream timed out"), began)
                continue
            except (aiohttp.ClientError, OSError) as error:
                self._fail(candidate, _Failure("connection_error", None, _describe(error)), began)
                continue
            if 200 <= status < 300:
                try:
                    completion = parse(adapter, target, payload)
                except UpstreamProtocolError as error:
                    self._fail(candidate, _Failure("invalid_response", status, str(error)), began)
                    continue
                self._note(candidate, status, "ok", began)
                self._chosen(candidate)
                breaker.record_success(candidate.key.id)
                return completion
            if status in CLIENT_CAUSED:
                raise self._refused(candidate, adapter, status, payload, began)
            retry_after = _retry_after(upstream_headers) if status == 429 else None
            failure = _status_failure(adapter, status, payload, upstream_headers)
            self._fail(candidate, failure, began, retry_after=retry_after)
        raise self.exhausted()

    async def open_stream(
        self, build: Callable[[Adapter, Target], UpstreamRequest], client_wants_usage: bool
    ) -> "OpenStream":
        """A stream from the first candidate that sends a first chunk; failures before it fail over."""
        for candidate in self.candidates:
            remaining = self.deadline - time.perf_counter()
            if remaining <= 0:
                break
            adapter = adapter_for(candidate.key.provider)
            target = target_for(candidate)
            upstream_request = _build(build, adapter, target)
            began = time.perf_counter()
            response: aiohttp.ClientResponse | None = None
            try:
                async with asyncio.timeout(remaining):
                    response = await post(
                        upstream_request.url,
                        data=upstream_request.body,
                        headers=upstream_request.headers,
                        timeout=self._timeout(remaining, stream=True),
                    )
                    status = response.status
                    if not 200 <= status < 300:
                        payload = await response.read()
                        response.release()
                        if status in CLIENT_CAUSED:
                            raise self._refused(candidate, adapter, status, payload, began)
                        retry_after = _retry_after(response.headers) if status == 429 else None
                        failure = _status_failure(adapter, status, payload, response.headers)
                        self._fail(candidate, failure, began, retry_after=retry_after)
                        continue
                    translator = adapter.stream_translator(target, client_wants_usage=client_wants_usage)
                    events = sse_events(response.content)
                    first = await _first_frames(events, translator)
            except TimeoutError:
                _close(response)
                self._fail(
                    candidate,
                    _Failure("timeout", None, "the upstream timed out before its first chunk"),
                    began,
                )
                continue
            except (aiohttp.ClientError, OSError, UpstreamProtocolError) as error:
                _close(response)
                outcome = (
                    "invalid_response" if isinstance(error, UpstreamProtocolError) else "connection_error"
                )
                self._fail(candidate, _Failure(outcome, None, _describe(error)), began)
                continue
            except BaseException:
                _close(response)
                raise
            self._note(candidate, status, "ok", began)
            self._chosen(candidate)
            breaker.record_success(candidate.key.id)
            return OpenStream(response=response, events=events, translator=translator, first=first)
        raise self.exhausted()


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


def _close(response: aiohttp.ClientResponse | None) -> None:
    if response is not None:
        response.close()


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]
