"""Big and malformed request bodies on /v1/ (issue 20, section 4): a body near the limit leaves only
what the audit log keeps on the spool; a body that is not JSON as OpenAI reads it (a lone surrogate,
NaN or Infinity, another content type) is a 400 in OpenAI's shape before any upstream sees it, never
a 500."""

import json

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from apps.outbox import spool
from apps.outbox.outbox import outbox
from apps.proxy.adapters.base import dumps
from tests.proxy.conftest import add_alias_async, add_provider_key_async, bearer, entries

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def routed(organization, upstream):
    await add_provider_key_async(organization, upstream, secret="sk-upstream-one")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await add_alias_async(organization, "embed", ("openai", "text-embedding-3-small"))
    return upstream


async def keep_bodies(organization, mode: str = "full") -> None:
    from apps.organizations import services as organization_services

    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data={"log_bodies": mode}
    )


def spooled_records(request_id: str) -> list[dict]:
    """The request records of ``request_id`` on this node's spool, as the ingest will read them."""
    outbox().writer.seal()  # its sealing thread may rename the file under us otherwise
    found = []
    for path in spool.waiting_files(outbox().directory):
        with open(path, "rb") as file:
            for line in file:
                _kind, payload = spool.decode(line)
                if isinstance(payload, dict) and payload.get("request_id") == request_id:
                    found.append(payload)
    return found


def assert_refused(response, code: str = "invalid_json") -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code
    assert response.headers["x-should-retry"] == "false"


# --- Big bodies --------------------------------------------------------------------------------


async def test_a_big_body_is_cut_to_what_the_audit_log_keeps_before_it_is_spooled(
    proxy, routed, organization, gateway_key
):
    await keep_bodies(organization)
    limit = settings.GATEWAY_AUDIT_MAX_BODY_BYTES
    text = "the quarterly report " * (2 * 1024 * 1024 // 21)  # 2 MiB, far over the 64 KiB kept
    response = await proxy.post(
        "/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": text}]},
        headers=bearer(gateway_key[1]),
    )
    assert response.status_code == 200
    assert routed.last_request.json["messages"][0]["content"] == text  # the upstream got it whole

    request_id = response.headers["x-gateway-request-id"]
    (payload,) = await database_sync_to_async(spooled_records)(request_id)
    # The stand-in echoes the prompt: the answer is as big, and cut the same way.
    assert len(payload["request_body"]) == len(payload["response_body"]) == limit
    assert payload["request_body_truncated"] is payload["response_body_truncated"] is True

    (entry,) = await entries()
    assert entry.request_body.endswith("…[truncated]")
    assert entry.request_body.startswith(
        '{"model":"fast","messages":[{"role":"user","content":"the quarterly'
    )
    assert "Hello from upstream" in entry.response_body
    assert entry.response_body.endswith("…[truncated]")


async def test_a_body_under_the_limit_is_spooled_and_logged_whole(proxy, routed, organization, gateway_key):
    await keep_bodies(organization)
    response = await proxy.post(
        "/v1/chat/completions", json={"model": "fast", "messages": HELLO}, headers=bearer(gateway_key[1])
    )

    (payload,) = await database_sync_to_async(spooled_records)(response.headers["x-gateway-request-id"])
    assert payload["request_body_truncated"] is False
    (entry,) = await entries()
    assert json.loads(entry.request_body) == {"model": "fast", "messages": HELLO}


async def test_big_token_arrays_are_embedded(proxy, routed, gateway_key):
    tokens = [[1234, 5678, 91011] * 100] * 2000  # about 3.5 MiB, 600,000 numbers
    response = await proxy.post(
        "/v1/embeddings", json={"model": "embed", "input": tokens}, headers=bearer(gateway_key[1])
    )

    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 2000


@pytest.mark.parametrize(
    "value",
    [[[1, 2], [3, True]], [[1, 2], []], [[1, 2], "a"], [1, 2.5], [True], ["a", 1], [[1], [2.0]]],
    ids=repr,
)
async def test_token_arrays_hold_integers_only(proxy, routed, gateway_key, value):
    response = await proxy.post(
        "/v1/embeddings", json={"model": "embed", "input": value}, headers=bearer(gateway_key[1])
    )
    assert_refused(response, "invalid_input")
    assert routed.requests == []


# --- Lone surrogates ------------------------------------------------------------------------------

LONE = rb'"a lone surrogate \ud800 here"'


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            b'{"model": "fast", "messages": [{"role": "user", "content": ' + LONE + b"}]}",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "fast", "stream": true, "messages": [{"role": "user", "content": ' + LONE + b"}]}",
        ),
        (
            "/v1/chat/completions",
            b'{"model": "fast", "messages": [{"role": "user", "content": "hi"}], "user": "\\udfff"}',
        ),
        ("/v1/embeddings", b'{"model": "embed", "input": ' + LONE + b"}"),
        ("/v1/embeddings", b'{"model": "embed", "input": ["ok", "x\\ud83d"]}'),
    ],
    ids=["chat", "stream", "unknown field, low half", "embeddings", "embeddings list, high half"],
)
async def test_a_lone_surrogate_is_a_400_never_a_500(proxy, routed, gateway_key, path, body):
    response = await proxy.post(
        path, content=body, headers={**bearer(gateway_key[1]), "content-type": "application/json"}
    )

    assert_refused(response)
    assert "surrogate" in response.json()["error"]["message"]
    assert routed.requests == []


async def test_an_escaped_surrogate_pair_and_an_escaped_backslash_pass_through(proxy, routed, gateway_key):
    # An emoji as a client with ensure_ascii writes it, and the text \ud800 (its backslash escaped).
    content = rb'"smile \ud83d\ude00 and \\ud800 as text"'
    body = b'{"model": "fast", "stream": true, "messages": [{"role": "user", "content": ' + content + b"}]}"
    response = await proxy.post(
        "/v1/chat/completions",
        content=body,
        headers={**bearer(gateway_key[1]), "content-type": "application/json"},
    )

    assert response.status_code == 200, response.text
    assert routed.last_request.json["messages"][0]["content"] == "smile \U0001f600 and \\ud800 as text"
    assert "\U0001f600" in response.text or "\\ud83d\\ude00" in response.text


def test_an_answer_with_a_lone_surrogate_is_written_escaped():
    # An upstream's answer may carry one (Python's parser lets it through); no client request can.
    assert json.loads(dumps({"content": "x\ud800y", "ok": "é"})) == {"content": "x\ud800y", "ok": "é"}
    assert dumps({"ok": "é"}) == '{"ok":"é"}'.encode()


# --- NaN, Infinity and numbers too large ----------------------------------------------------------


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1.5E+999"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
async def test_nan_and_infinity_are_refused_like_openai_refuses_invalid_json(
    proxy, routed, gateway_key, number, path
):
    model = b"fast" if "chat" in path else b"embed"
    body = b'{"model": "' + model + b'", "messages": [{"role": "user", "content": "hi"}], "input": "hi", '
    body += b'"temperature": ' + number + b"}"
    response = await proxy.post(
        path, content=body, headers={**bearer(gateway_key[1]), "content-type": "application/json"}
    )

    assert_refused(response)
    assert routed.requests == []


async def test_ordinary_floats_pass_through(proxy, routed, gateway_key):
    body = b'{"model": "fast", "messages": [{"role": "user", "content": "hi"}], '
    body += b'"temperature": 0.2, "top_p": 1e-3}'
    response = await proxy.post(
        "/v1/chat/completions",
        content=body,
        headers={**bearer(gateway_key[1]), "content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert routed.last_request.json["top_p"] == 0.001


# --- Content types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
async def test_a_body_of_another_content_type_is_refused(proxy, routed, gateway_key, content_type):
    body = json.dumps({"model": "fast", "messages": HELLO}).encode()
    response = await proxy.post(
        "/v1/chat/completions", content=body, headers={**bearer(gateway_key[1]), "content-type": content_type}
    )

    assert_refused(response, "unsupported_content_type")
    assert routed.requests == []


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", None])
async def test_json_with_parameters_or_without_the_header_is_read(proxy, routed, gateway_key, content_type):
    headers = bearer(gateway_key[1])
    if content_type is not None:
        headers["content-type"] = content_type
    body = json.dumps({"model": "fast", "messages": HELLO}).encode()
    response = await proxy.post("/v1/chat/completions", content=body, headers=headers)

    assert response.status_code == 200, response.text


async def test_an_outsiders_key_reads_nothing_of_this_organizations_spool(
    proxy, routed, organization, gateway_key
):
    # The refusals above are per request: another organization's key on the same body gets its own
    # 400 and no entry of this organization (the wall between organizations holds on this path too).
    from tests.factories import OrganizationFactory, create_api_key

    other = await database_sync_to_async(OrganizationFactory)()
    _, secret = await database_sync_to_async(create_api_key)(other)
    response = await proxy.post(
        "/v1/chat/completions",
        content=b'{"model": "fast", "messages": [{"role": "user", "content": "\\ud800"}]}',
        headers={**bearer(secret), "content-type": "application/json"},
    )

    assert_refused(response)
    (entry,) = await entries()
    assert str(entry.organization_id) == str(other.id)
