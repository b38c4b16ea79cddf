"""One small request to a provider key's upstream, to see whether the key works: the console's "test
this key".

The request is the provider's model list (``GET /models``; Anthropic's ``/v1/models``; Azure OpenAI's
``/openai/models?api-version=``): it proves the address, the TLS and the secret, costs nothing, and needs
no model name, which a chat completion would (a provider key serves every model of its provider). It is
made here, with httpx, rather than through the proxy's adapters, which this layer cannot import; the
wire format of a model list is a URL and an authentication header.

Addresses follow the rule every upstream call follows (addresses.py): the host is resolved once, every
address is checked, and the connection goes to the first of them (the ``Host`` header and TLS's SNI keep
the name, so the certificate is checked for it); redirects are not followed. What the upstream answers
on a failure is shown with the key masked (scrubbing.py), never the secret.
"""

import json
import time
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from django.conf import settings

from apps.core.crypto import InvalidToken

from .addresses import AddressRefused, checked_addresses
from .models import Provider, ProviderKey
from .protocols import ANTHROPIC_VERSION
from .scrubbing import scrub_key

READ_TIMEOUT = 10.0
BODY_LIMIT = 16_384  # a model list is a few kilobytes; an error less
MESSAGE_LIMIT = 500


@dataclass(frozen=True, slots=True)
class UpstreamCheck:
    succeeded: bool
    url: str  # what was called (the secret is never in a URL)
    status: int | None  # the upstream's HTTP status; None when it did not answer
    latency_ms: int | None  # until the whole answer was read; None when nothing was sent
    message: str  # what the upstream answered: the number of models, or its error with the key masked


def upstream_check(provider_key: ProviderKey) -> UpstreamCheck:
    """Asks ``provider_key``'s upstream for its model list with the key's secret."""
    base_url = provider_key.effective_base_url
    try:
        secret = provider_key.secret()
    except InvalidToken:
        return _not_sent(base_url, "The secret cannot be decrypted with GATEWAY_ENCRYPTION_KEYS.")
    url, headers = _models_request(provider_key, base_url, secret)
    try:
        address = checked_addresses(base_url)[0]
    except AddressRefused as error:
        return _not_sent(url, error.message)
    started = time.monotonic()
    try:
        status, body = _get(httpx.URL(url), address, headers)
    except httpx.TimeoutException as error:
        kind = "Connecting" if isinstance(error, httpx.ConnectTimeout) else "Waiting for the answer"
        return _not_answered(url, started, f"{kind} timed out.")
    except httpx.HTTPError as error:
        return _not_answered(url, started, scrub_key(f"{type(error).__name__}: {error}", secret))
    latency_ms = round((time.monotonic() - started) * 1000)
    if 200 <= status < 300:
        return UpstreamCheck(True, url, status, latency_ms, _listed(body))
    if 300 <= status < 400:
        return UpstreamCheck(False, url, status, latency_ms, "A redirect, which is not followed.")
    message = scrub_key(_error_message(body), secret)
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + "…"
    return UpstreamCheck(False, url, status, latency_ms, message or "No message.")


def _models_request(provider_key: ProviderKey, base_url: str, secret: str) -> tuple[str, dict[str, str]]:
    """The model list's URL and authentication, in the provider's convention (as the proxy's adapters
    authenticate: a bearer token, Azure's ``api-key``, Anthropic's ``x-api-key`` with its version)."""
    if provider_key.provider == Provider.ANTHROPIC:
        return f"{base_url}/v1/models", {"x-api-key": secret, "anthropic-version": ANTHROPIC_VERSION}
    if provider_key.provider == Provider.AZURE_OPENAI:
        version = quote(provider_key.api_version)
        return f"{base_url}/openai/models?api-version={version}", {"api-key": secret}
    return f"{base_url}/models", {"authorization": f"Bearer {secret}"}


def _get(url: httpx.URL, address: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """GETs ``url`` from the checked ``address``: its status and at most ``BODY_LIMIT`` bytes."""
    pinned = url.copy_with(host=address)
    extensions = {} if url.host == address else {"sni_hostname": url.host}
    headers = {**headers, "Host": url.netloc.decode("ascii"), "Accept-Encoding": "identity"}
    # READ_TIMEOUT bounds each read; the body, however slowly it drips, must also be read by then
    # (an answer's status line and headers are bounded by the read timeout alone).
    deadline = time.monotonic() + READ_TIMEOUT + settings.GATEWAY_CONNECT_TIMEOUT_SECONDS
    with (
        httpx.Client(
            verify=httpx.create_ssl_context(),  # honours SSL_CERT_FILE / SSL_CERT_DIR, as the proxy
            trust_env=False,  # a proxy from the environment would resolve the name itself
            follow_redirects=False,
            timeout=httpx.Timeout(READ_TIMEOUT, connect=settings.GATEWAY_CONNECT_TIMEOUT_SECONDS),
        ) as client,
        client.stream("GET", pinned, headers=headers, extensions=extensions) as response,
    ):
        received = bytearray()
        for chunk in response.iter_raw():
            received += chunk
            if len(received) >= BODY_LIMIT:
                break
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout("the answer took too long")
        return response.status_code, bytes(received[:BODY_LIMIT])


def _listed(body: bytes) -> str:
    try:
        models = json.loads(body).get("data")
    except (ValueError, AttributeError):
        models = None
    if isinstance(models, list):
        return f"The key works: the upstream listed {len(models)} model{'' if len(models) == 1 else 's'}."
    return "The key works: the upstream answered."


def _error_message(body: bytes) -> str:
    """The message of an upstream's error, in OpenAI's, Anthropic's or Azure's shape; its text
    otherwise."""
    text = body.decode("utf-8", errors="replace").replace("\x00", "").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    if not isinstance(parsed, dict):
        return text
    error = parsed.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error["message"]
    if isinstance(error, str):
        return error
    if isinstance(parsed.get("message"), str):  # Azure's API management answers {"statusCode", "message"}
        return parsed["message"]
    return text


def _not_sent(url: str, message: str) -> UpstreamCheck:
    return UpstreamCheck(False, url, None, None, message)


def _not_answered(url: str, started: float, message: str) -> UpstreamCheck:
    return UpstreamCheck(False, url, None, round((time.monotonic() - started) * 1000), message)
