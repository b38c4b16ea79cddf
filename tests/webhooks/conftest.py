import hashlib
import hmac
import time

import pytest
from django.db.models.signals import pre_save

from apps.core.crypto import InvalidToken
from apps.webhooks.models import Webhook
from tests.secret_scan import ledger
from tests.webhooks.receiver import Receiver

WEBHOOKS = "/api/v1/organizations/current/webhooks"
DELIVERIES = f"{WEBHOOKS}/deliveries"


@pytest.fixture(scope="session", autouse=True)
def _webhook_secrets_in_the_secret_scan():
    """Every webhook secret made in these tests goes into the run's secret scan (tests/secret_scan.py),
    as provider keys do: none may be found in a log, the audit log or a file the run leaves."""

    def record(sender, instance: Webhook, **kwargs) -> None:
        if instance.secret_encrypted:
            try:
                secrets = instance.signing_secrets()
            except InvalidToken:  # a test of lost encryption keys
                return
            for secret in secrets:
                ledger.add(secret)

    pre_save.connect(record, sender=Webhook, weak=False, dispatch_uid="webhook-secrets-ledger")
    yield
    pre_save.disconnect(sender=Webhook, dispatch_uid="webhook-secrets-ledger")


@pytest.fixture
def receiver(tmp_path, monkeypatch):
    """A live HTTPS receiver whose certificate the gateway trusts through SSL_CERT_FILE."""
    server = Receiver(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(server.certificate))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    yield server
    server.close()


def verify_signature(secret: str, header: str, body: bytes, tolerance: int = 300) -> bool:
    """The receiver's check, as docs/webhooks.md shows it."""
    items = [item.split("=", 1) for item in header.split(",") if "=" in item]
    timestamps = [value for key, value in items if key == "t"]
    signatures = [value for key, value in items if key == "v1"]
    if len(timestamps) != 1 or not timestamps[0].isdigit():
        return False
    timestamp = int(timestamps[0])
    if abs(time.time() - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, signature) for signature in signatures)


def create_webhook(client, url: str, **fields) -> dict:
    response = client.post(WEBHOOKS, {"url": url, **fields}, format="json")
    assert response.status_code == 201, response.content
    return response.json()
