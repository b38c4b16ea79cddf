"""Sending one delivery: one HTTPS POST to the webhook's URL, connected to the address checked for it.

- The host is resolved once, every address it resolves to is checked (apps/webhooks/addresses.py),
  and the connection goes to the first of them: the URL's host is replaced by that address, the
  ``Host`` header keeps the name and TLS is started with the name as SNI, so the certificate is
  verified for the name. There is no second look-up a changed DNS answer could slip into.
- TLS verification is always on. The CA bundle is ``SSL_CERT_FILE`` (or ``SSL_CERT_DIR``) when set,
  for a private CA, and certifi's otherwise; proxies from the environment are not used (a proxy
  would resolve the name itself).
- Redirects are not followed (a 3xx is a failure); a connection has ``CONNECT_TIMEOUT`` seconds,
  and every read or write ``READ_TIMEOUT`` seconds; only the first ``BODY_LIMIT`` bytes of the
  answer are read, and kept only when the attempt failed.
- A failed attempt also gets a reason in a few words (``Outcome.reason``: "connection refused",
  "timed out connecting", "HTTP 500" ...), chosen from a fixed list, so it never carries the URL, a
  header or the receiver's answer: the console shows it where no HTTP status came back.
"""

import errno
import ssl
import time
from dataclasses import dataclass

import httpx

from .addresses import WebhookAddressRefused, WebhookHostUnresolved, resolve

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 5.0
BODY_LIMIT = 4096
ERROR_LIMIT = 300


@dataclass(frozen=True, slots=True)
class Outcome:
    succeeded: bool
    response_status: int | None
    duration_ms: int
    error: str
    reason: str = ""  # empty on success


def send(url: str, *, body: bytes, headers: dict[str, str]) -> Outcome:
    started = time.monotonic()

    def outcome(succeeded: bool, status: int | None, error: str, reason: str = "") -> Outcome:
        return Outcome(succeeded, status, round((time.monotonic() - started) * 1000), error, reason)

    try:
        target = resolve(url)
    except WebhookHostUnresolved as error:
        return outcome(False, None, f"Not sent: {error.message}", "host not found")
    except WebhookAddressRefused as error:
        return outcome(False, None, f"Not sent: {error.message}", "address not allowed")
    name = target.url.host
    pinned = target.url.copy_with(host=target.address)
    extensions = {} if name == target.address else {"sni_hostname": name}
    request_headers = {
        **headers,
        "Host": target.url.netloc.decode("ascii"),
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",  # the capped read takes the bytes as they come
    }
    try:
        with (
            httpx.Client(
                verify=httpx.create_ssl_context(),  # honours SSL_CERT_FILE / SSL_CERT_DIR
                trust_env=False,
                follow_redirects=False,
                timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
            ) as client,
            client.stream(
                "POST", pinned, content=body, headers=request_headers, extensions=extensions
            ) as response,
        ):
            answer = _read_capped(response)
    except httpx.ConnectTimeout:
        return outcome(
            False, None, f"Connecting timed out after {CONNECT_TIMEOUT:g} s.", "timed out connecting"
        )
    except httpx.TimeoutException:
        return outcome(False, None, f"No answer within {READ_TIMEOUT:g} s.", "no answer in time")
    except httpx.HTTPError as error:
        return outcome(
            False, None, f"{type(error).__name__}: {str(error)[:ERROR_LIMIT]}", failure_reason(error)
        )
    status = response.status_code
    if 200 <= status < 300:
        return outcome(True, status, "")
    if 300 <= status < 400:
        return outcome(False, status, f"HTTP {status}: redirects are not followed.", "redirect not followed")
    text = answer.decode("utf-8", errors="replace").replace("\x00", "")
    return outcome(False, status, f"HTTP {status}: {text}".rstrip(": "), f"HTTP {status}")


# errno values of a network that cannot reach the address.
_UNREACHABLE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN}


def failure_reason(error: httpx.HTTPError) -> str:
    """Why a request without an answer failed, in a few words, read from the error Python raised:
    httpx wraps it (through httpcore's) as the cause, so the chain is walked."""
    causes: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and len(causes) < 10:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return "TLS certificate not trusted"
        if isinstance(cause, ssl.SSLError):
            return "TLS handshake failed"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        if isinstance(cause, OSError) and cause.errno in _UNREACHABLE:
            return "host unreachable"
    if isinstance(error, httpx.ConnectError):
        return "connection failed"
    if isinstance(error, httpx.RemoteProtocolError):
        return "no valid HTTP answer"
    return "request failed"


def _read_capped(response: httpx.Response) -> bytes:
    received = bytearray()
    for chunk in response.iter_raw():
        received += chunk
        if len(received) >= BODY_LIMIT:
            break
    return bytes(received[:BODY_LIMIT])
