"""Feedback sent at once, before the request's audit entry exists (issue 20, section 6): a live Daphne
answers, the application posts its thumbs-up straight away, and the ingest (the Celery worker's
thread, the `make run` path, not eager) writes the entry later. Nothing is lost, nothing is attached
to a request the key did not make."""

import subprocess
import sys
import time
import uuid

import httpx
import pytest

from apps.audit.models import AuditEntry
from apps.experiments.models import Feedback, PendingFeedback
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import ROOT, daphne_server, subprocess_env
from tests.upstreams import upstream  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = [sys.executable, "-m", "celery", "-A", "gateway_project", "worker", "--pool", "solo"]
CHAT = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


@pytest.fixture
def live(organization, upstream, tmp_path):  # noqa: F811
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    # The worker's own broker, so it never takes a task of another gateway sharing this Redis.
    env = {"GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox"), "CELERY_BROKER_URL": "filesystem://"}
    with daphne_server(tmp_path, **env) as base_url, httpx.Client(base_url=base_url, timeout=10) as client:
        yield (
            client,
            lambda: subprocess.Popen(
                WORKER, cwd=ROOT, env=subprocess_env(tmp_path, **env), stdout=subprocess.DEVNULL
            ),
        )


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(20)


def test_feedback_sent_before_the_ingest_runs_is_accepted_and_attached_once_it_does(organization, live):
    client, start_worker = live
    _, secret = create_api_key(organization)
    _, other_secret = create_api_key(organization, name="other")
    key = {"Authorization": f"Bearer {secret}"}

    answer = client.post("/v1/chat/completions", json=CHAT, headers=key)
    assert answer.status_code == 200
    request_id = answer.headers["x-gateway-request-id"]
    # At once, with no ingest running at all: the entry cannot exist yet.
    first = client.post("/api/v1/feedback", json={"request_id": request_id, "score": 1}, headers=key)
    assert first.status_code == 202, first.content
    assert first.json()["status"] == "pending"
    second = client.post(
        "/api/v1/feedback", json={"request_id": request_id, "label": "great", "comment": "ok"}, headers=key
    )
    assert second.status_code == 202
    # Another key of the organization, and an id the gateway never answered: the same answer as
    # for a pending request (a caller learns nothing of other keys' requests), and never recorded.
    stranger = {"Authorization": f"Bearer {other_secret}"}
    for request in (request_id, str(uuid.uuid4())):
        response = client.post(
            "/api/v1/feedback", json={"request_id": request, "score": -1}, headers=stranger
        )
        assert response.status_code == 202
    assert not AuditEntry.objects.exists() and not Feedback.objects.exists()

    worker = start_worker()
    try:
        assert wait_for(
            lambda: (
                Feedback.objects.exists()
                and not PendingFeedback.objects.filter(request_id=request_id).exists()
            )
        )
    finally:
        stop(worker)

    feedback = Feedback.objects.get()
    assert str(feedback.request_id) == request_id
    assert (feedback.score, feedback.label, feedback.comment) == (1.0, "great", "ok")
    # Once the entry is there, the key's post updates it at once; another key's still gets the
    # answer an unknown id gets, and changes nothing.
    update = client.post("/api/v1/feedback", json={"request_id": request_id, "score": 0}, headers=key)
    assert update.status_code == 200 and update.json()["status"] == "recorded"
    refused = client.post("/api/v1/feedback", json={"request_id": request_id, "score": 1}, headers=stranger)
    assert refused.status_code == 202
    assert Feedback.objects.get().score == 0.0
    assert not PendingFeedback.objects.filter(request_id=request_id).exists()


def test_feedback_sent_right_after_each_response_while_the_worker_ingests_is_never_lost(organization, live):
    client, start_worker = live
    _, secret = create_api_key(organization)
    key = {"Authorization": f"Bearer {secret}"}
    worker = start_worker()
    try:
        request_ids, statuses = [], set()
        for number in range(40):
            answer = client.post("/v1/chat/completions", json=CHAT, headers=key)
            assert answer.status_code == 200
            request_id = answer.headers["x-gateway-request-id"]
            request_ids.append(request_id)
            response = client.post(
                "/api/v1/feedback", json={"request_id": request_id, "score": number}, headers=key
            )
            assert response.status_code in (201, 202), response.content
            statuses.add(response.status_code)
        assert wait_for(lambda: Feedback.objects.count() == len(request_ids))
    finally:
        stop(worker)
    scores = dict(Feedback.objects.values_list("request_id", "score"))
    assert {str(request): score for request, score in scores.items()} == {
        request: float(number) for number, request in enumerate(request_ids)
    }
    assert not PendingFeedback.objects.exists()
