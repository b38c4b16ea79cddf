"""The dry run compiles without a database connection and once for many dry runs at once (issue 19,
finding 1, third round: twenty concurrent dry runs of one organization held the pool's connections
while each compiled the whole engine, and another organization's requests answered 500)."""

import threading

import pytest
from django.db import connections
from rest_framework.test import APIClient

from apps.policies import selectors, services
from apps.policies.engine import PolicyEngine
from apps.policies.engine_cache import dry_run_engines
from tests.conftest import login

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/policies/dry-run"
CONCURRENT = 6  # under the test pool's 10 connections, so the unfixed code fails on counts, not timeouts
SAMPLE = {"model": "fast", "messages": [{"role": "user", "content": "hi about titan"}]}


@pytest.fixture(autouse=True)
def _fresh_engines():
    dry_run_engines.clear()
    yield
    dry_run_engines.clear()


@pytest.fixture
def builds(monkeypatch):
    """Every engine compiled, with whether the compiling thread still held a database connection.
    The first compile waits until every dry run of the test has read its policies, so the others
    are surely asking for an engine while it is being compiled (no timing involved)."""
    compiled: list[dict] = []
    everyone_read = threading.Event()
    expected = {"reads": 1}
    reads = []
    original_build = PolicyEngine.__dict__["build"].__func__
    original_read = selectors.active_policy_snapshots

    def read(organization_id):
        snapshots = original_read(organization_id)
        reads.append(organization_id)
        if len(reads) >= expected["reads"]:
            everyone_read.set()
        return snapshots

    def build(cls, snapshots, **kwargs):
        holding = [c.alias for c in connections.all(initialized_only=True) if c.connection is not None]
        compiled.append({"policies": [s.name for s in snapshots], "holding": holding})
        assert everyone_read.wait(timeout=30), "the other dry runs never read their policies"
        return original_build(cls, snapshots, **kwargs)

    monkeypatch.setattr(selectors, "active_policy_snapshots", read)
    monkeypatch.setattr(PolicyEngine, "build", classmethod(build))

    def expect_reads(count: int) -> list[dict]:
        reads.clear()
        everyone_read.clear()
        expected["reads"] = count
        return compiled

    return expect_reads


def _client(email: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {login(APIClient(), email)['access']}")
    return client


def _concurrently(email: str, count: int) -> list:
    answers: list = [None] * count

    def run(index: int) -> None:
        try:
            answers[index] = _client(email).post(URL, SAMPLE, format="json")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


def _term_policies(organization, count: int) -> None:
    for index in range(count):
        services.policy_create(
            organization=organization,
            data={"name": f"terms {index}", "action": "block", "terms": ["titan", f"word{index}"]},
        )


def test_concurrent_dry_runs_compile_the_engine_once_without_holding_a_database_connection(
    owner, organization, outsider, builds
):
    _term_policies(organization, 7)
    services.policy_create(
        organization=outsider.organization, data={"name": "theirs", "action": "flag", "detectors": ["email"]}
    )
    compiled = builds(CONCURRENT)

    answers = _concurrently(owner.user.email, CONCURRENT)

    assert [answer.status_code for answer in answers] == [200] * CONCURRENT
    assert {answer.json()["reason"] for answer in answers} == {"terms 0: term"}
    assert len(compiled) == 1, compiled
    assert compiled[0]["holding"] == []

    # Another organization's dry run gets its own engine (the cache is per organization) ...
    builds(1)
    theirs = _client(outsider.user.email).post(URL, SAMPLE, format="json").json()
    assert (theirs["action"], theirs["blocked"]) == (None, False)
    assert [c["policies"] for c in compiled[1:]] == [["theirs"]]
    # ... and a changed policy set is compiled anew.
    services.policy_create(
        organization=organization, data={"name": "later", "action": "flag", "detectors": ["email"]}
    )
    builds(1)
    assert _client(owner.user.email).post(URL, SAMPLE, format="json").json()["blocked"] is True
    assert len(compiled) == 3 and compiled[2]["holding"] == []
