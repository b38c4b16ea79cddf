"""``GET /metrics`` of a live server after real traffic through it: parsed with prometheus-client's
own parser, every counter moves by exactly what was sent."""

import asyncio
import json
import socket
import subprocess
import sys
from collections import Counter
from decimal import Decimal

import httpx
import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from apps.core.redis import redis_key, sync_client
from apps.limits.services import limits_set
from apps.policies.services import policy_create
from tests.factories import create_api_key
from tests.servers import ROOT, daphne_server, subprocess_env, until, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"


def chat(model: str = "fast", **fields) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 5, **fields}


def scrape(base_url: str, **headers: str) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    response = httpx.get(f"{base_url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, held), v in samples.items() if n == name and wanted <= set(held))


def test_the_counters_move_by_exactly_the_requests_sent(gateway, routed):
    _, secret = create_api_key(routed)
    auth = {"Authorization": f"Bearer {secret}"}
    answers = [httpx.post(f"{gateway}{CHAT}", json=chat(), headers=auth) for _ in range(3)]
    answers.append(httpx.post(f"{gateway}{CHAT}", json=chat(temperature=0), headers=auth))
    answers.append(httpx.post(f"{gateway}{CHAT}", json=chat(temperature=0), headers=auth))  # a hit
    streamed_body = chat(stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", f"{gateway}{CHAT}", json=streamed_body, headers=auth) as streamed:
        assert streamed.status_code == 200
        lines = list(streamed.iter_lines())
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    (stream_usage,) = [event["usage"] for event in events if event.get("usage")]
    stream_cost = next(
        Decimal(line.split("=")[1]) for line in lines if line.startswith(": x-gateway-cost-usd=")
    )
    refused = [httpx.post(f"{gateway}{CHAT}", json=chat(), headers={"Authorization": "Bearer sk-wrong"})]
    unknown = httpx.post(f"{gateway}/v1/no/such/path-7f3e9a", json={}, headers=auth)
    assert [a.status_code for a in answers] == [200] * 5 and refused[0].status_code == 401
    assert unknown.status_code == 404

    def settled():
        return total(scrape(gateway), "gateway_requests_total") == 8

    assert until(settled, timeout=10)
    samples = scrape(gateway)
    base = {"endpoint": CHAT, "model": "gpt-4o-mini", "provider": "openai"}
    assert total(samples, "gateway_requests_total", endpoint=CHAT, status="200") == 6
    assert value(samples, "gateway_requests_total", **base, status="200") == 5
    # The cache hit: no upstream, so no provider; the model as it was asked for.
    hit = {"endpoint": CHAT, "model": "fast", "provider": ""}
    assert value(samples, "gateway_requests_total", **hit, status="200") == 1
    assert total(samples, "gateway_requests_total", endpoint=CHAT, status="401") == 1
    # A path the proxy does not serve is one label value, never the path: paths are unbounded.
    assert total(samples, "gateway_requests_total", endpoint="unknown", status="404") == 1
    assert not any("path-7f3e9a" in str(labels) for _, labels in samples)

    cache_results = Counter(a.headers["x-gateway-cache"] for a in answers)
    cache_results.update(["bypass"])  # the stream
    cache_results.update(["bypass", "bypass"])  # refused before any stage: the 401 and the 404
    for result in ("l1", "miss", "bypass"):
        assert value(samples, "gateway_cache_requests_total", result=result) == cache_results[result]
    assert cache_results["l1"] == 1
    usages = [a.json()["usage"] for a in answers if a.headers["x-gateway-cache"] != "l1"] + [stream_usage]
    # What the upstreams processed: a cache hit's tokens were counted when its answer was made.
    assert value(samples, "gateway_tokens_total", direction="input") == sum(
        u["prompt_tokens"] for u in usages
    )
    assert value(samples, "gateway_tokens_total", direction="output") == sum(
        u["completion_tokens"] for u in usages
    )
    cost = sum(Decimal(a.headers["x-gateway-cost-usd"]) for a in answers) + stream_cost
    assert value(samples, "gateway_cost_usd_total", provider="openai") == pytest.approx(float(cost), rel=1e-9)
    assert cost > 0

    assert value(samples, "gateway_request_duration_seconds_count", endpoint=CHAT) == 7
    assert value(samples, "gateway_request_duration_seconds_bucket", endpoint=CHAT, le="+Inf") == 7
    assert value(samples, "gateway_overhead_seconds_count", endpoint=CHAT) == 7
    assert value(samples, "gateway_ttft_seconds_count", endpoint=CHAT) == 1
    # Every upstream call (the cache hit made none).
    assert value(samples, "gateway_upstream_duration_seconds_count", provider="openai") == 5
    assert 0 < value(samples, "gateway_upstream_duration_seconds_sum", provider="openai") < 5
    assert value(samples, "gateway_outbox_backlog") >= 0
    assert value(samples, "process_resident_memory_bytes") > 0


@pytest.fixture
def quick_breaker(tmp_path, routed):
    with daphne_server(tmp_path, GATEWAY_BREAKER_COOLDOWN_SECONDS="2") as base_url:
        yield base_url


def test_refusals_upstream_errors_and_the_breaker_are_counted(quick_breaker, routed, upstream):
    gateway = quick_breaker
    api_key, secret = create_api_key(routed)
    limits_set(organization=routed, api_key=api_key, rate_limits={"rpm": 1, "tpm": None})
    auth = {"Authorization": f"Bearer {secret}"}
    statuses = [httpx.post(f"{gateway}{CHAT}", json=chat(), headers=auth).status_code for _ in range(3)]
    assert statuses == [200, 429, 429]

    _, other = create_api_key(routed, name="failing")
    upstream.behave("status", status=500)
    failed = [
        httpx.post(f"{gateway}{CHAT}", json=chat(), headers={"Authorization": f"Bearer {other}"})
        for _ in range(3)
    ]
    assert {answer.status_code for answer in failed} == {502}

    def counted():
        return total(scrape(gateway), "gateway_requests_total") == 6

    assert until(counted, timeout=10)
    samples = scrape(gateway)
    assert value(samples, "gateway_rate_limited_total", scope="api_key") == 2
    errors = total(samples, "gateway_upstream_errors_total", provider="openai", category="upstream_error")
    assert errors >= 3  # each request tried the key at least once (and retried it)
    (provider_key_id,) = {
        dict(labels)["provider_key_id"] for name, labels in samples if name == "gateway_breaker_open"
    }
    breaker = {"provider": "openai", "provider_key_id": provider_key_id}
    assert value(samples, "gateway_breaker_open", **breaker) == 1
    # Its cooldown over, the key may be tried again: shown closed, with no request to try it.
    assert until(lambda: value(scrape(gateway), "gateway_breaker_open", **breaker) == 0, timeout=10)


def test_a_refused_requests_model_is_not_a_label_and_a_served_ones_is_cut(gateway, routed):
    _, secret = create_api_key(routed)
    auth = {"Authorization": f"Bearer {secret}"}
    refused = httpx.post(f"{gateway}{CHAT}", json=chat("made-up-model-31337"), headers=auth)
    assert refused.status_code == 404
    # The stand-in upstream serves any model name it is given.
    served = httpx.post(f"{gateway}{CHAT}", json=chat("openai/" + "x" * 300), headers=auth)
    assert served.status_code == 200
    assert until(lambda: total(scrape(gateway), "gateway_requests_total") == 2, timeout=10)
    labels = [dict(held) for name, held in scrape(gateway) if name == "gateway_requests_total"]
    assert sorted((sample["status"], sample["model"]) for sample in labels) == [
        ("200", "x" * 100),
        ("404", ""),
    ]


def test_budget_refusals_and_policy_actions_are_counted(gateway, routed):
    # Before the first request: without Redis, the server learns of no later change to its configuration.
    for policy in (
        {"name": "no pii", "action": "redact", "detectors": ["email"]},
        {"name": "no secrets", "action": "block", "terms": ["project falcon"]},
        {"name": "watch", "action": "flag", "detectors": ["ip_address"]},
    ):
        policy_create(organization=routed, data=policy)
    api_key, secret = create_api_key(routed)
    limits_set(organization=routed, api_key=api_key, budget={"amount_usd": "0.000001", "period": "daily"})
    _, unlimited = create_api_key(routed, name="unlimited")

    answer = httpx.post(f"{gateway}{CHAT}", json=chat(), headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 402
    assert until(lambda: value(scrape(gateway), "gateway_budget_refusals_total", scope="api_key") == 1, 10)

    prompts = ["Write to ada@example.com", "Mail bob@example.com", "Tell me about Project Falcon"]
    prompts += ["ping 10.1.2.3", "Say hello"]
    answers = [
        httpx.post(
            f"{gateway}{CHAT}",
            json=chat(messages=[{"role": "user", "content": prompt}]),
            headers={"Authorization": f"Bearer {unlimited}"},
        )
        for prompt in prompts
    ]
    assert [a.status_code for a in answers] == [200, 200, 400, 200, 200]
    assert until(lambda: total(scrape(gateway), "gateway_requests_total") == 6, timeout=10)
    samples = scrape(gateway)
    acted = Counter(a.headers.get("x-gateway-policy-action") for a in answers)
    assert acted == {"redacted": 2, "blocked": 1, "flagged": 1, None: 1}
    for action in ("redacted", "blocked", "flagged"):
        assert value(samples, "gateway_policy_actions_total", action=action) == acted[action]
    assert total(samples, "gateway_policy_actions_total") == 4  # the request no policy acted on: none


def test_two_server_processes_are_summed_in_either_ones_scrape_l2_hits_included(tmp_path, routed):
    _, secret = create_api_key(routed)
    auth = {"Authorization": f"Bearer {secret}"}
    shared = {"GATEWAY_METRICS_DIR": str(tmp_path / "metrics")}
    with daphne_server(tmp_path, **shared) as first, daphne_server(tmp_path, **shared) as second:
        for base_url, count in ((first, 2), (second, 3)):
            for _ in range(count):
                assert httpx.post(f"{base_url}{CHAT}", json=chat(), headers=auth).status_code == 200

        def both_counted(base_url: str) -> bool:
            return (
                value(
                    scrape(base_url),
                    "gateway_requests_total",
                    endpoint=CHAT,
                    model="gpt-4o-mini",
                    provider="openai",
                    status="200",
                )
                == 5
            )

        assert until(lambda: both_counted(first), timeout=10)
        assert both_counted(second)

        # A process killed as it created its file leaves it empty or half-written for good: the
        # scrape leaves it out, not answers 500 from then on.
        (tmp_path / "metrics" / "counter_4242424.db").write_bytes(b"")
        (tmp_path / "metrics" / "histogram_4242425.db").write_bytes(b"\x40\x00\x00\x00" + b"\xff" * 12)
        assert both_counted(first) and both_counted(second)

        # L2, the cache the processes share in Redis (there is none without): one's answer, the other's hit.
        if settings.REDIS_URL:
            cached = chat(temperature=0)
            made = httpx.post(f"{first}{CHAT}", json=cached, headers=auth)
            assert made.headers["x-gateway-cache"] == "miss"
            entries = redis_key("cache", str(routed.id), "*")
            written = until(lambda: next(sync_client().scan_iter(match=entries), None), timeout=10)
            assert written  # after the answer, in the background
            hit = httpx.post(f"{second}{CHAT}", json=cached, headers=auth)
            assert hit.headers["x-gateway-cache"] == "l2"

            def cache_results() -> tuple[float, ...]:
                samples = scrape(first)
                return tuple(value(samples, "gateway_cache_requests_total", result=r) for r in ("miss", "l2"))

            assert until(lambda: cache_results() == (1, 1), timeout=10), cache_results()


@pytest.fixture
def one_port_two_processes(tmp_path):
    """Two server processes serving one listening socket (opened here, inherited by both: Daphne's
    ``--fd``), sharing their node's metrics folder, as several processes per node run."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    env = subprocess_env(tmp_path, GATEWAY_METRICS_DIR=str(tmp_path / "metrics"))
    command = [sys.executable, "-m", "gateway_project.serve", "--fd", str(listener.fileno())]
    servers = []
    try:
        for number in range(2):
            log = open(tmp_path / f"server-{number}.log", "w+b")
            server = subprocess.Popen(
                [*command, "gateway_project.asgi:application"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(listener.fileno(),),
            )
            servers.append((server, log))
        for server, log in servers:
            wait_until_serving(base_url, server, log)
        yield base_url, [server.pid for server, _ in servers]
    finally:
        listener.close()
        for server, log in servers:
            server.terminate()
            server.wait(30)
            log.close()


def test_a_scrape_of_either_process_on_one_port_counts_every_request(
    one_port_two_processes, routed, tmp_path
):
    base_url, _ = one_port_two_processes
    _, secret = create_api_key(routed)

    async def burst() -> list[int]:
        # Connections at once: the kernel hands each to whichever process accepts it first.
        async with httpx.AsyncClient(timeout=30) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        f"{base_url}{CHAT}", json=chat(), headers={"Authorization": f"Bearer {secret}"}
                    )
                    for _ in range(30)
                )
            )
        return [answer.status_code for answer in answers]

    assert asyncio.run(burst()) == [200] * 30
    labels = {"endpoint": CHAT, "model": "gpt-4o-mini", "provider": "openai", "status": "200"}
    assert until(lambda: value(scrape(base_url), "gateway_requests_total", **labels) == 30, timeout=10)
    # Whichever process answers a scrape, the sum is the node's.
    assert {value(scrape(base_url), "gateway_requests_total", **labels) for _ in range(10)} == {30.0}
    served = [
        (tmp_path / f"server-{n}.log").read_text().count('"POST /v1/chat/completions" 200') for n in range(2)
    ]
    print("requests answered by each process:", served)


def test_a_scrape_needs_the_token_when_one_is_set(tmp_path, routed):
    with daphne_server(tmp_path, GATEWAY_METRICS_TOKEN="scrape-token-1") as base_url:
        assert httpx.get(f"{base_url}/metrics").status_code == 401
        wrong = httpx.get(f"{base_url}/metrics", headers={"Authorization": "Bearer scrape-token-2"})
        assert wrong.status_code == 401
        assert "scrape-token-1" not in wrong.text
        assert scrape(base_url, Authorization="Bearer scrape-token-1")
        assert httpx.post(f"{base_url}/metrics").status_code == 405
