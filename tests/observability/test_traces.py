"""Traces received by an OTLP/HTTP receiver on loopback, decoded with opentelemetry-proto: the span
tree of a proxied request, its GenAI attributes, the caller's traceparent continued and the one
sent upstream."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from apps.policies.services import policy_create
from tests.factories import PASSWORD, create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import daphne_server, free_port, until
from tests.test_shutdown import Gateway

pytestmark = pytest.mark.django_db(transaction=True)

UPSTREAM_SECRET = "sk-upstream-traces-51f0"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SERVER, CLIENT = 2, 3  # the protocol's SpanKind values


class Collector:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, decoded."""

    def __init__(self, spool_to) -> None:
        self.spans: list = []
        self.raw = spool_to  # what was received, kept where the suite's secret scan looks
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                with open(collector.raw, "ab") as kept:
                    kept.write(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        collector.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def named(self, name: str) -> list:
        return [span for span in self.spans if span.name == name]


def attributes(span) -> dict:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            values[attribute.key] = [item.string_value for item in value.array_value.values]
        else:
            values[attribute.key] = getattr(value, kind)
    return values


@pytest.fixture
def collector(tmp_path):
    receiver = Collector(tmp_path / "received-spans.bin")
    yield receiver
    receiver.server.shutdown()


@pytest.fixture
def gateway(tmp_path, organization, upstream, collector):
    add_provider_key(organization, upstream, secret=UPSTREAM_SECRET)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    with daphne_server(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="gateway-under-test",
        OTEL_BSP_SCHEDULE_DELAY="100",
    ) as base_url:
        yield base_url


def test_proxied_requests_are_server_spans_with_their_attempts_and_stages_under_the_callers_trace(
    gateway, organization, upstream, collector, team
):
    add_alias(organization, "embed", ("openai", "text-embedding-3-small"))
    # A policy that redacts answers: a whole answer's scan is a stage span too.
    policy_create(
        organization=organization,
        data={
            "name": "house style",
            "action": "redact",
            "patterns": ["from upstream"],
            "apply_to_response": True,
        },
    )
    _, secret = create_api_key(organization, team=team)
    auth = {"Authorization": f"Bearer {secret}"}
    answer = httpx.post(
        f"{gateway}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 5},
        headers={
            **auth,
            "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
            "baggage": "user.email=ada@example.com",
        },
    )
    assert answer.status_code == 200
    streamed_body = {
        "model": "fast",
        "messages": [{"role": "user", "content": "Count to three"}],
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=streamed_body, headers=auth) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    embedded = httpx.post(f"{gateway}/v1/embeddings", json={"model": "embed", "input": "hello"}, headers=auth)
    assert embedded.status_code == 200

    def server_span(request_id: str):
        found = [s for s in collector.spans if attributes(s).get("gateway.request_id") == request_id]
        return found[0] if found else None

    request_ids = [r.headers["x-request-id"] for r in (answer, streamed, embedded)]
    assert until(
        lambda: all(map(server_span, request_ids)) and len(collector.named("chat gpt-4o-mini")) == 2,
        timeout=10,
    ), [(s.name, attributes(s)) for s in collector.spans]
    server, stream_server, embeddings_server = map(server_span, request_ids)

    assert server.name == "chat fast" and server.kind == SERVER
    assert server.trace_id.hex() == CALLER_TRACE and server.parent_span_id.hex() == CALLER_SPAN
    usage = answer.json()["usage"]
    assert attributes(server) | {"gateway.cost_usd": None} == attributes(server) | {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "fast",
        "gen_ai.provider.name": "openai",
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": usage["prompt_tokens"],
        "gen_ai.usage.output_tokens": usage["completion_tokens"],
        "gen_ai.response.finish_reasons": ["stop"],
        "gateway.request_id": answer.headers["x-request-id"],
        "gateway.cache": answer.headers["x-gateway-cache"],
        "gateway.team_id": str(team.id),
        "http.response.status_code": 200,
        "gateway.cost_usd": None,
    }
    assert attributes(server)["gateway.cost_usd"] == pytest.approx(
        float(answer.headers["x-gateway-cost-usd"])
    )

    (attempt,) = [s for s in collector.named("chat gpt-4o-mini") if s.parent_span_id == server.span_id]
    assert attempt.kind == CLIENT and attempt.trace_id.hex() == CALLER_TRACE
    assert attributes(attempt) | {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gateway.attempt.outcome": "ok",
    } == attributes(attempt)
    # The upstream got the attempt's context: its own spans would join this trace.
    sent = upstream.requests[0].headers["traceparent"]  # the first request's
    assert sent == f"00-{CALLER_TRACE}-{attempt.span_id.hex()}-01"
    assert not any("baggage" in r.headers for r in upstream.requests)  # the caller's own headers stay here

    # The stages that cost time, each a child of its request's span (the answer's scan redacted it).
    assert answer.json()["choices"][0]["message"]["content"].startswith("Hello [REDACTED:pattern]")
    for stage in ("gateway.admission", "gateway.policies", "gateway.cache", "gateway.policies.answer"):
        assert [s.parent_span_id for s in collector.named(stage) if s.trace_id == server.trace_id] == [
            server.span_id
        ], stage

    # A stream's finish reasons, from the chunks it sent.
    assert stream_server.name == "chat fast"
    assert attributes(stream_server)["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes(stream_server)["gateway.team_id"] == str(team.id)

    assert embeddings_server.name == "embeddings embed"
    (embedding_attempt,) = collector.named("embeddings text-embedding-3-small")
    assert embedding_attempt.kind == CLIENT and embedding_attempt.parent_span_id == embeddings_server.span_id
    assert attributes(embedding_attempt)["gen_ai.operation.name"] == "embeddings"

    received = collector.raw.read_bytes()
    assert secret.encode() not in received and UPSTREAM_SECRET.encode() not in received
    assert b"Say hello" not in received and b"Count to three" not in received  # no prompt text


def test_a_request_without_a_traceparent_starts_a_trace_and_the_management_api_is_traced(
    gateway, organization, collector
):
    refused = httpx.post(f"{gateway}/v1/chat/completions", json={}, headers={"Authorization": "Bearer sk-no"})
    assert refused.status_code == 401
    assert httpx.get(f"{gateway}/api/v1/api-keys").status_code == 401
    # A path and a query string that carry secrets: the spans say where, not what.
    httpx.get(f"{gateway}/console/invitations/Zk3q9w0Yp2xV7rT5nB8mL1cD4wq/?code=callback-code-77a1")

    def proxied():
        return [s for s in collector.spans if s.kind == SERVER and "gateway.request_id" in attributes(s)]

    def managed():
        return [s for s in collector.spans if s.kind == SERVER and "api/v1" in str(attributes(s))]

    assert until(lambda: proxied() and managed(), timeout=10), [
        (s.name, s.kind, attributes(s)) for s in collector.spans
    ]
    assert until(lambda: b"invitations/[token]" in collector.raw.read_bytes(), timeout=10)
    received = collector.raw.read_bytes()
    assert b"Zk3q9w0Yp2xV7rT5nB8mL1cD4wq" not in received and b"callback-code-77a1" not in received
    (span,) = proxied()
    assert span.name == "chat"  # no model: the operation alone
    assert not span.parent_span_id and attributes(span)["http.response.status_code"] == 401


@pytest.fixture
def content_gateway(tmp_path, organization, upstream, collector):
    add_provider_key(organization, upstream, secret=UPSTREAM_SECRET)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    with daphne_server(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="100",
        GATEWAY_TRACE_CONTENT="true",
    ) as base_url:
        yield base_url


@pytest.mark.parametrize(("log_bodies", "kept"), [("metadata", False), ("redacted", True)])
def test_content_is_on_a_span_only_when_asked_for_and_as_the_audit_log_keeps_it(
    content_gateway, organization, collector, log_bodies, kept
):
    organization.log_bodies = log_bodies
    organization.save(update_fields=["log_bodies"])
    _, secret = create_api_key(organization)
    prompt = "Say hello to ada@example.com"
    answer = httpx.post(
        f"{content_gateway}/v1/chat/completions",
        json={"model": "fast", "messages": [{"role": "user", "content": prompt}], "max_tokens": 5},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert answer.status_code == 200
    assert until(lambda: collector.named("chat fast"), timeout=10)
    (span,) = collector.named("chat fast")
    values = attributes(span)
    if not kept:
        assert "gen_ai.input.messages" not in values and "gen_ai.output.messages" not in values
        return
    assert "Say hello to" in values["gen_ai.input.messages"]
    assert "ada@example.com" not in values["gen_ai.input.messages"]  # redacted, as the audit log keeps it
    assert "Hello from upstream" in values["gen_ai.output.messages"]


def test_the_workers_tasks_are_traced(tmp_path, owner, collector):
    """make run's tree with traces on: a webhook's test delivery, sent from the management API to
    the worker, is a span of each (the standard Celery instrumentation)."""
    owner.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")  # the live server's hasher
    owner.user.save(update_fields=["password"])
    traced = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "GATEWAY_ALLOW_PRIVATE_WEBHOOKS": "true",
    }
    with Gateway(tmp_path, **traced) as gateway:
        login = {"email": owner.user.email, "password": PASSWORD}
        access = httpx.post(f"{gateway.base_url}/api/v1/auth/login", json=login).json()["access"]
        session = {"Authorization": f"Bearer {access}"}
        webhooks = f"{gateway.base_url}/api/v1/organizations/current/webhooks"
        # Nobody listens there: the delivery fails, and is traced all the same.
        hook = f"https://127.0.0.1:{free_port()}/hook"
        created = httpx.post(webhooks, json={"url": hook}, headers=session)
        assert created.status_code == 201, created.text
        tested = httpx.post(f"{webhooks}/{created.json()['id']}/test", headers=session)
        assert tested.status_code == 202, tested.text
        delivered = "run/apps.webhooks.tasks.deliver"
        ran = until(lambda: any(span.name == delivered for span in collector.spans), timeout=30)
        assert gateway.stop() == 0
    assert ran, sorted({span.name for span in collector.spans})
    names = {span.name for span in collector.spans}
    assert "apply_async/apps.webhooks.tasks.deliver" in names  # sent by the server, in the same trace
