"""GATEWAY_OUTBOX_DELIVERY=ingest_process, as `make run` serves the gateway: Daphne only spools its
audit entries and `manage.py outbox_ingest` writes them; every request still lands in the log."""

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


def test_the_ingest_process_writes_what_the_server_spooled(organization, upstream, tmp_path):
    add_provider_key(organization, upstream)
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)
    env = {"GATEWAY_OUTBOX_DELIVERY": "ingest_process", "GATEWAY_OUTBOX_DIR": str(tmp_path / "outbox")}

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
        time.sleep(1.0)  # let the server seal its spool file; nobody writes to the database yet
        assert not AuditEntry.objects.exists()

        ingest = subprocess.Popen(
            [sys.executable, "manage.py", "outbox_ingest", "--interval", "0.05"],
            cwd=ROOT,
            env=subprocess_env(tmp_path, **env),
        )
        try:
            deadline = time.monotonic() + 20
            while AuditEntry.objects.count() < len(request_ids) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            ingest.terminate()
            ingest.wait(10)

    assert set(map(str, AuditEntry.objects.values_list("id", flat=True))) == set(request_ids)
