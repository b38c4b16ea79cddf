"""Property tests of the proxy: whatever a key holder sends, the gateway answers in OpenAI's shape,
never with a 500, and leaves exactly one audit entry for the request.

Hypothesis makes the requests: JSON bodies of any shape (deeply nested too), bytes that are not
JSON, model names with slashes, NULs and characters outside Latin-1, and the headers a client
controls (the team header, the data-region header, X-Forwarded-For, Cache-Control). They go to the
gateway's ASGI application in this process, in front of a loopback upstream, and each request's
entry is read back from the audit log by its request id. The peer is a trusted proxy
(GATEWAY_TRUSTED_PROXIES), so the X-Forwarded-For a client forges is parsed, not ignored.
"""

import asyncio
import ipaddress
import json

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.audit.models import AuditEntry
from apps.outbox.outbox import outbox
from apps.proxy.upstream import close_sessions
from gateway_project.asgi import http_app
from gateway_project.client_address import parse_trusted_proxies, trust_forwarded_for
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key

pytestmark = pytest.mark.django_db(transaction=True)

PEER = "203.0.113.7"
# The gateway as it runs behind a proxy: X-Forwarded-For from the peer is read (client_address.py).
application = trust_forwarded_for(http_app, parse_trusted_proxies(["203.0.113.0/24"]))

EXAMPLES = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI stays reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

text = st.text(st.characters(codec="utf-8"), max_size=40)
header_text = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=60)
models = st.one_of(
    st.sampled_from(["fast", "openai/gpt-4o-mini", "fast\u0000", "openai/", "/", "openai/模型", "🙂"]),
    text,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "bogus"])})
    | st.fixed_dictionaries({"role": st.just("user"), "content": text | json_values}),
    max_size=3,
)


def deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


chat_bodies = st.fixed_dictionaries(
    {"model": models, "messages": messages},
    optional={"stream": st.booleans(), "temperature": json_values, "max_tokens": json_values},
)
bodies = st.one_of(
    chat_bodies.map(lambda body: json.dumps(body).encode()),
    json_values.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=64),
    st.integers(min_value=1_000, max_value=200_000).map(deep),
)
client_headers = st.fixed_dictionaries(
    {},
    optional={
        "x-gateway-team": header_text,
        "x-gateway-data-region": header_text,
        "x-forwarded-for": header_text | st.ip_addresses().map(str),
        "cache-control": header_text,
    },
)


@pytest.fixture
def gateway(organization, upstream):
    add_provider_key(organization, upstream, secret="sk-upstream-properties-0001")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    return create_api_key(organization)[1]


def chat(model: str, **fields) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


@EXAMPLES
@example(path="/v1/chat/completions", body=chat("openai/模型"), headers={})  # the model is a header value
@example(path="/v1/chat/completions", body=chat("openai/模型", stream=True), headers={})
@example(path="/v1/chat/completions", body=chat("fast\u0000"), headers={})  # PostgreSQL refuses NUL
@example(path="/v1/chat/completions", body=chat("fast"), headers={"x-forwarded-for": "not-an-ip"})
@example(path="/v1/chat/completions", body=chat("fast"), headers={"x-forwarded-for": "1.2.3.4, 203.0.113.9"})
@example(path="/v1/chat/completions", body=chat("fast"), headers={"x-forwarded-for": "[::1]:80, ,\x00é"})
@example(path="/v1/chat/completions", body=chat("fast"), headers={"x-forwarded-for": "fe80::1%eth0"})
@example(path="/v1/chat/completions", body=chat("fast"), headers={"x-gateway-team": "\x00é"})
@example(path="/v1/embeddings", body=b'{"model": "fast", "input": "\\u0000"}', headers={})
@example(path="/v1/chat/completions", body=deep(100_000), headers={})
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/embeddings"]), body=bodies, headers=client_headers)
def test_any_request_gets_an_openai_shaped_answer_and_exactly_one_audit_entry(gateway, path, body, headers):
    status, answer_headers, content = asyncio.run(_send(gateway, path, body, headers))

    assert status != 500, content[:500]
    request_id = answer_headers["x-gateway-request-id"]
    if status >= 400:
        error = json.loads(content)["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert "Traceback" not in error["message"]
    outbox().flush()
    assert AuditEntry.objects.filter(id=request_id).count() == 1
    entry = AuditEntry.objects.get(id=request_id)
    assert entry.status == status
    # Whatever the header held, the recorded client is an address (or none), never the raw text.
    assert entry.client_ip is None or ipaddress.ip_address(entry.client_ip)
    forwarded = headers.get("x-forwarded-for")
    if entry.client_ip is not None and forwarded is not None and entry.client_ip != PEER:
        assert entry.client_ip in _addresses_in(forwarded)  # read from the header, not made up


async def _send(secret: str, path: str, body: bytes, headers: dict[str, str]):
    transport = httpx.ASGITransport(app=application, client=(PEER, 5000))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=30) as client:
            # Bytes, so values outside ASCII reach the gateway as a client would send them (latin-1).
            request_headers = {
                "authorization": f"Bearer {secret}".encode(),
                "content-type": b"application/json",
                **{name: value.encode("latin-1") for name, value in headers.items()},
            }
            async with client.stream("POST", path, content=body, headers=request_headers) as r:
                content = await r.aread()
                return r.status_code, r.headers, content
    finally:
        await close_sessions()


def _addresses_in(forwarded: str) -> set[str]:
    """Every address the header names, with or without a port, as the audit log writes one."""
    found = set()
    for hop in forwarded.split(","):
        hop = hop.strip().removeprefix("[").split("]")[0]
        for text in (hop, hop.rsplit(":", 1)[0]):
            try:
                address = ipaddress.ip_address(text.split("%")[0])
            except ValueError:
                continue
            mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
            found.add(str(mapped or address))
    return found


def test_the_property_test_sends_what_it_claims(gateway):
    """The examples reach the upstream at all: a plain request through the same helper answers 200."""
    body = json.dumps({"model": "fast", "messages": [{"role": "user", "content": "hi"}]}).encode()
    status, _headers, content = asyncio.run(_send(gateway, "/v1/chat/completions", body, {}))
    assert status == 200, content
    assert json.loads(content)["choices"][0]["message"]["content"] == "Hello from upstream: hi"

    # X-Forwarded-For from the peer is believed, so the examples' forged headers are really parsed.
    _, headers, _ = asyncio.run(
        _send(gateway, "/v1/chat/completions", body, {"x-forwarded-for": "198.51.100.1"})
    )
    outbox().flush()
    assert AuditEntry.objects.get(id=headers["x-gateway-request-id"]).client_ip == "198.51.100.1"


def test_deeply_nested_json_is_a_400_not_a_500(gateway):
    status, headers, content = asyncio.run(_send(gateway, "/v1/chat/completions", deep(100_000), {}))
    assert status == 400, content
    assert headers["x-should-retry"] == "false"
