"""A real Prometheus (Debian's ``prometheus``) against a live gateway, for what deploy/observability/
ships: it scrapes the gateway's /metrics, loads alerts.yml, and answers every query of the Grafana
dashboard, read straight from grafana-dashboard.json so the dashboard and this test cannot drift.
promtool checks the rules and runs their unit tests (alerts_test.yml).

Prometheus listens on a free loopback port and scrapes 127.0.0.1 only; `make prometheus` installs
it (root), and without it these tests are skipped."""

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from apps.limits.services import limits_set
from apps.observability import metrics as gateway_metrics
from tests.factories import create_api_key
from tests.servers import ROOT, free_port, until

DEPLOY = ROOT / "deploy" / "observability"
ALERTS = DEPLOY / "alerts.yml"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

needs_prometheus = pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()),
    reason="Prometheus is not installed (Debian's prometheus package: `make prometheus`)",
)

CHAT = "/v1/chat/completions"
# The dashboard's variables as Grafana fills them in: the scrape job below, every instance, and a
# rate window long enough for this test's few seconds of 1 s scrapes.
VARIABLES = {"$__rate_interval": "1m", "$instance": ".*", "$job": "gateway"}
# Panels of events this test does not cause: their queries must be valid and their metrics
# declared by the gateway, but they have no series to return.
NO_DATA_PANELS = {"Policy actions", "Dead letters", "Webhook deliveries"}


def chat(**fields) -> dict:
    messages = [{"role": "user", "content": "Say hello"}]
    return {"model": "fast", "messages": messages, "max_tokens": 5, **fields}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' nested panels included, with
    the dashboard's variables filled in."""
    queries = []

    def walk(panels):
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                expr = target["expr"]
                for name, value in VARIABLES.items():
                    expr = expr.replace(name, value)
                assert "$" not in expr, f"{panel['title']}: a variable this test does not fill in: {expr}"
                queries.append((panel["title"], expr))

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return queries


def declared_metric_names() -> set[str]:
    """The series names the gateway's metrics (apps/observability/metrics.py) can expose."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    names = set()
    for metric in vars(gateway_metrics).values():
        if isinstance(metric, MetricWrapperBase):
            for family in metric.describe():
                names.update(family.name + suffix for suffix in suffixes[family.type])
    return names


def query(prometheus: str, expr: str) -> list[dict]:
    """An instant query's result; fails the test with Prometheus's error when the query is invalid."""
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
    body = answer.json()
    assert answer.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def scalar(prometheus: str, expr: str) -> float | None:
    result = query(prometheus, expr)
    return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus(tmp_path, gateway):
    """Prometheus scraping the gateway every second and evaluating alerts.yml; yields its base URL."""
    target = httpx.URL(gateway)
    assert target.host == "127.0.0.1"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [
                    {
                        "job_name": "gateway",
                        "metrics_path": "/metrics",
                        "static_configs": [{"targets": [f"127.0.0.1:{target.port}"]}],
                    }
                ],
            }
        )
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "w+b")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"prometheus exited early:\n{log.read().decode(errors='replace')}")
        try:
            return httpx.get(f"{base_url}/-/ready", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        assert until(ready, timeout=15), "prometheus did not become ready within 15 s"
        assert until(lambda: scalar(base_url, 'up{job="gateway"}') == 1, timeout=10), (
            f"prometheus did not scrape the gateway: {query(base_url, 'up')}"
        )
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@needs_prometheus
@pytest.mark.django_db(transaction=True)
def test_prometheus_scrapes_the_gateway_and_runs_every_dashboard_query(prometheus, gateway, routed, upstream):
    _, secret = create_api_key(routed)
    auth = {"Authorization": f"Bearer {secret}"}
    # Limits set before the first request (a server keeps an organization's limits for a while).
    limited_key, limited = create_api_key(routed, name="limited")
    limits_set(organization=routed, api_key=limited_key, rate_limits={"rpm": 1, "tpm": None})
    broke_key, broke = create_api_key(routed, name="broke")
    limits_set(organization=routed, api_key=broke_key, budget={"amount_usd": "0.000001", "period": "daily"})
    statuses: Counter[int] = Counter()

    def send(headers=auth, **fields) -> httpx.Response:
        answer = httpx.post(f"{gateway}{CHAT}", json=chat(**fields), headers=headers, timeout=10)
        statuses[answer.status_code] += 1
        return answer

    for _ in range(3):
        assert send().status_code == 200
    assert send(temperature=0).headers["x-gateway-cache"] == "miss"
    assert send(temperature=0).headers["x-gateway-cache"] == "l1"
    streamed = {"stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{gateway}{CHAT}", json=chat(**streamed), headers=auth, timeout=10) as stream:
        stream.read()
        statuses[stream.status_code] += 1
    assert [send({"Authorization": f"Bearer {limited}"}).status_code for _ in range(2)] == [200, 429]
    assert send({"Authorization": f"Bearer {broke}"}).status_code == 402
    # The upstream fails from here on: 5xx answers, upstream errors, and the key's breaker opens.
    upstream.behave("status", status=500)
    failed = [send().status_code for _ in range(3)]
    assert all(status >= 500 for status in failed), failed
    sent = sum(statuses.values())
    assert sent == 12

    # Prometheus has every request once the gateway has added them up (within a second) and the
    # next scrape has taken them.
    assert until(lambda: scalar(prometheus, "sum(gateway_requests_total)") == sent, timeout=10), query(
        prometheus, "sum by (status) (gateway_requests_total)"
    )
    by_status = {
        int(row["metric"]["status"]): float(row["value"][1])
        for row in query(prometheus, 'sum by (status) (gateway_requests_total{job="gateway"})')
    }
    assert by_status == {status: float(count) for status, count in statuses.items()}

    queries = dashboard_queries()
    assert len(queries) >= 30
    expected = [(title, expr) for title, expr in queries if title not in NO_DATA_PANELS]
    # Every query is valid; each one whose events happened returns series once a rate has two samples.
    empty: list[tuple[str, str]] = []

    def all_answered() -> bool:
        empty[:] = [(title, expr) for title, expr in expected if not query(prometheus, expr)]
        return not empty

    assert until(all_answered, timeout=10), f"dashboard queries without data: {empty}"
    for _, expr in queries:
        query(prometheus, expr)

    # The panels with no data yet name metrics the gateway declares (not a typo that never matches).
    scraped = set(httpx.get(f"{prometheus}/api/v1/label/__name__/values", timeout=5).json()["data"])
    known = scraped | declared_metric_names()
    named = {name for _, expr in queries for name in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr)}
    assert named - known == set()
    assert {"gateway_policy_actions_total", "gateway_outbox_dead_letters_total"} <= named

    # The numbers the dashboard shows are the traffic's.
    assert scalar(prometheus, 'sum(gateway_requests_total{status=~"5.."})') == len(failed)
    assert scalar(prometheus, "sum(gateway_cache_requests_total)") == sent
    assert scalar(prometheus, 'gateway_cache_requests_total{result="l1"}') == 1
    assert scalar(prometheus, "gateway_rate_limited_total") == 1
    assert scalar(prometheus, 'gateway_budget_refusals_total{scope="api_key"}') == 1
    assert scalar(prometheus, 'sum(gateway_upstream_errors_total{category="upstream_error"})') >= 3
    assert scalar(prometheus, 'gateway_ttft_seconds_count{endpoint="/v1/chat/completions"}') == 1
    assert scalar(prometheus, 'sum(gateway_tokens_total{direction="output"})') > 0
    assert scalar(prometheus, "max(gateway_breaker_open)") == 1

    # The variables' queries find this job and its instance (what Grafana lists in the pickers).
    choices = {"job": ["gateway"], "instance": [httpx.URL(gateway).netloc.decode()]}
    variables = [v for v in json.loads(DASHBOARD.read_text())["templating"]["list"] if v["type"] == "query"]
    assert {variable["name"] for variable in variables} == set(choices)
    for variable in variables:
        selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"]).groups()
        answer = httpx.get(
            f"{prometheus}/api/v1/label/{label}/values",
            params={"match[]": selector.replace("$job", "gateway")},
            timeout=5,
        )
        assert answer.json()["data"] == choices[variable["name"]]

    # alerts.yml is loaded, every rule evaluates without an error, and the open breaker is pending.
    rule_names = [rule["alert"] for rule in yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]]

    def rules() -> list[dict]:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert [group["name"] for group in groups] == ["gateway"]
        return groups[0]["rules"]

    assert [rule["name"] for rule in rules()] == rule_names
    assert until(lambda: all(rule["health"] == "ok" for rule in rules()), timeout=5), rules()

    def pending() -> set[str]:
        alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return {alert["labels"]["alertname"] for alert in alerts if alert["state"] == "pending"}

    assert until(lambda: "GatewayBreakerOpen" in pending(), timeout=5), pending()


@needs_prometheus
def test_promtool_checks_the_rules_and_the_example_config():
    rules = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS" in rules.stdout
    count = len(yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"])
    assert f"{count} rules found" in rules.stdout
    config = subprocess.run(
        [PROMTOOL, "check", "config", str(DEPLOY / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert config.returncode == 0, config.stdout + config.stderr


@needs_prometheus
def test_the_alerts_fire_on_their_unit_tests_series():
    """alerts_test.yml: each alert fires (labels and rendered annotations) when it should, not before
    its ``for:`` and not on the look-alike series beside it."""
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=DEPLOY, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
