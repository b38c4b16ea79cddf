"""manage.py reencrypt_secrets moves webhook secrets (the current one and a rolled one still signing)
to the new encryption key, so the old key can be dropped without breaking any signature."""

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command

from apps.core import crypto
from apps.webhooks import services
from apps.webhooks.models import Webhook

pytestmark = pytest.mark.django_db

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def encryption_keys(settings):
    def use(*keys: str) -> None:
        settings.GATEWAY_ENCRYPTION_KEYS = list(keys)
        crypto.forget_keys()

    yield use
    crypto.forget_keys()


def test_webhook_secrets_move_to_the_new_key_and_keep_signing(encryption_keys, organization):
    encryption_keys(OLD)
    plain, plain_secret = services.webhook_create(
        organization=organization, data={"url": "https://127.0.0.1/a"}
    )
    rolled, first_secret = services.webhook_create(
        organization=organization, data={"url": "https://127.0.0.1/b"}
    )
    rolled, second_secret = services.webhook_roll_secret(webhook=rolled)
    updated_at = dict(Webhook.objects.values_list("pk", "updated_at"))
    encryption_keys(NEW, OLD)

    out = StringIO()
    call_command("reencrypt_secrets", stdout=out)

    assert "Re-encrypted 2 webhook secret(s)." in out.getvalue()
    assert "Re-encrypted 0 provider key secret(s)." in out.getvalue()
    encryption_keys(NEW)
    assert Webhook.objects.get(pk=plain.pk).signing_secrets() == [plain_secret]
    stored = Webhook.objects.get(pk=rolled.pk)
    assert stored.signing_secrets() == [second_secret, first_secret]
    assert Fernet(NEW.encode()).decrypt(stored.previous_secret_encrypted.encode()).decode() == first_secret
    assert dict(Webhook.objects.values_list("pk", "updated_at")) == updated_at
    assert not any(secret in out.getvalue() for secret in (plain_secret, first_secret, second_secret))
