"""Who writes the audit log: the servers only append to the spool; an ingest writes the database.
Either host of the one ingest loop writes every request a live Daphne answered: ``manage.py
outbox_ingest`` (a node without a Celery worker) and the Celery worker's thread (``make run``)."""

import subprocess
import sys
import time

import httpx
import pytest

from apps.audit.models import AuditEntry
from tests.factories import create_api_key
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import ROOT, daphne_server, subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)

INGESTS = {
    "outbox_ingest": [sys.executable, "manage.py", "outbox_ingest", "--interval", "0.05"],
    "celery_worker": [sys.executable, "-m", "celery", "-A", "gateway_project", "worker", "--pool", "solo"],
}


@pytest.mark.parametrize("host", INGESTS)
def test_the_ingest_writes_what_the_server_spooled(host, organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    # The worker's own broker, so it never takes a task of another gateway sharing this Redis.
    env = {"GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox"), "CELERY_BROKER_URL": "filesystem://"}

    with daphne_server(tmp_path, **env) as base_url:
        request_ids = []
        with httpx.Client(base_url=base_url, timeout=10) as client:
            for _ in range(30):
                response = client.post(
                    "/v1/chat/completions",
                    json={"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"Authorization": f"Bearer {secret}"},
                )
                assert response.status_code == 200
                request_ids.append(response.headers["x-gateway-request-id"])
        time.sleep(0.5)
        assert not AuditEntry.objects.exists()  # the server never writes the database itself

        ingest = subprocess.Popen(
            INGESTS[host], cwd=ROOT, env=subprocess_env(tmp_path, **env), stdout=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 30
            while AuditEntry.objects.count() < len(request_ids) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            ingest.terminate()
            ingest.wait(20)

    assert set(map(str, AuditEntry.objects.values_list("id", flat=True))) == set(request_ids)


def test_the_ingest_process_writes_what_was_sealed_as_it_stops(organization, upstream, tmp_path):
    """A pod's or a container's ingest is stopped right after its server, which sealed its spool as it
    drained: the ingest's SIGTERM runs one last round, so nothing waits on the volume for a pod that
    may never come back. Its rounds are an hour apart here: only the last one can write them."""
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    env = {"GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}
    ingest = subprocess.Popen(
        [sys.executable, "manage.py", "outbox_ingest", "--interval", "3600"],
        cwd=ROOT,
        env=subprocess_env(tmp_path, **env),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert ingest.stdout.readline().startswith("Ingesting")  # its first round, of nothing, is done
        with daphne_server(tmp_path, **env) as base_url:
            request_ids = [
                httpx.post(
                    f"{base_url}/v1/chat/completions",
                    json={"model": "fast", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"Authorization": f"Bearer {secret}"},
                ).headers["x-gateway-request-id"]
                for _ in range(5)
            ]
        ingest.terminate()
        assert ingest.wait(30) == 0
    finally:
        if ingest.poll() is None:
            ingest.kill()
            ingest.wait(10)
    assert set(map(str, AuditEntry.objects.values_list("id", flat=True))) == set(request_ids)
