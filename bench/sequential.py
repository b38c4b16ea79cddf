"""Sequential latency: one keep-alive client, one request at a time.

http.client rather than an async client: it adds the least of its own time to each request, and
whatever it adds is the same for the direct and the gateway runs, so it cancels out of the
difference the benchmark reports.
"""

import http.client
import time
from dataclasses import dataclass, field


class BadResponse(Exception):
    """A response the benchmark must not average in (an error, a missing header, a cut stream)."""


@dataclass
class Target:
    """Where requests go and what every answer must look like."""

    name: str
    port: int
    body: bytes
    headers: dict[str, str]
    required_header: str | None = None  # e.g. x-gateway-request-id on every gateway answer
    # A header every answer must carry with this value, e.g. ("x-gateway-cache", "l1").
    required_value: tuple[str, str] | None = None
    path: str = "/v1/chat/completions"
    # Bytes every answer's body must hold, e.g. b'"object":"response"' (a bridge's answer in its API's shape).
    required_body: bytes | None = None


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)

    def percentile(self, p: float) -> float:
        """Nearest-rank percentile, in milliseconds."""
        ordered = sorted(self.seconds)
        rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
        return ordered[rank] * 1000


def _check(target: Target, response: http.client.HTTPResponse, payload: bytes, *, stream: bool) -> None:
    if response.status != 200:
        raise BadResponse(f"{target.name}: HTTP {response.status}: {payload[:300]!r}")
    if target.required_header and not response.getheader(target.required_header):
        raise BadResponse(f"{target.name}: the answer has no {target.required_header} header")
    if target.required_value is not None:
        name, value = target.required_value
        if response.getheader(name) != value:
            raise BadResponse(f"{target.name}: {name} is {response.getheader(name)!r}, not {value!r}")
    if target.required_body is not None and target.required_body not in payload:
        raise BadResponse(
            f"{target.name}: the answer does not hold {target.required_body!r}: {payload[:300]!r}"
        )
    if stream and not payload.rstrip().endswith(b"data: [DONE]"):
        raise BadResponse(f"{target.name}: the stream did not end with data: [DONE]: {payload[-300:]!r}")


def completions(target: Target, count: int) -> Samples:
    """Time from sending the request to having read the whole answer."""
    samples = Samples()
    connection = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
    try:
        for _ in range(count):
            began = time.perf_counter()
            connection.request("POST", target.path, body=target.body, headers=target.headers)
            response = connection.getresponse()
            payload = response.read()
            samples.seconds.append(time.perf_counter() - began)
            _check(target, response, payload, stream=False)
    finally:
        connection.close()
    return samples


def stream_first_byte(target: Target, count: int) -> Samples:
    """Time from sending a streamed request to the first bytes of the body (the first event);
    the rest of the stream is read, and checked, outside the timing."""
    samples = Samples()
    connection = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
    try:
        for _ in range(count):
            began = time.perf_counter()
            connection.request("POST", target.path, body=target.body, headers=target.headers)
            response = connection.getresponse()
            first = response.read1(65536)  # returns as soon as the first chunk is in
            samples.seconds.append(time.perf_counter() - began)
            payload = first + response.read()
            _check(target, response, payload, stream=True)
    finally:
        connection.close()
    return samples
