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
"""

import time
from dataclasses import dataclass

import httpx

from .addresses import WebhookAddressRefused, resolve

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


def send(url: str, *, body: bytes, headers: dict[str, str]) -> Outcome:
    started = time.monotonic()

    def outcome(succeeded: bool, status: int | None, error: str) -> Outcome:
        return Outcome(succeeded, status, round((time.monotonic() - started) * 1000), error)

    try:
        target = resolve(url)
    except WebhookAddressRefused as error:
        return outcome(False, None, f"Not sent: {error.message}")
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
        return outcome(False, None, f"Connecting timed out after {CONNECT_TIMEOUT:g} s.")
    except httpx.TimeoutException:
        return outcome(False, None, f"No answer within {READ_TIMEOUT:g} s.")
    except httpx.HTTPError as error:
        return outcome(False, None, f"{type(error).__name__}: {str(error)[:ERROR_LIMIT]}")
    if 200 <= response.status_code < 300:
        return outcome(True, response.status_code, "")
    if 300 <= response.status_code < 400:
        return outcome(
            False, response.status_code, f"HTTP {response.status_code}: redirects are not followed."
        )
    text = answer.decode("utf-8", errors="replace").replace("\x00", "")
    return outcome(False, response.status_code, f"HTTP {response.status_code}: {text}".rstrip(": "))


def _read_capped(response: httpx.Response) -> bytes:
    received = bytearray()
    for chunk in response.iter_raw():
        received += chunk
        if len(received) >= BODY_LIMIT:
            break
    return bytes(received[:BODY_LIMIT])
