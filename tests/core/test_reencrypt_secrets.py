"""manage.py reencrypt_secrets: rotating the key that encrypts provider key secrets at rest."""

from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from apps.core import crypto
from apps.providers.models import ProviderKey
from tests.factories import create_provider_key

pytestmark = pytest.mark.django_db

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


@pytest.fixture
def encryption_keys(settings):
    """Sets GATEWAY_ENCRYPTION_KEYS; crypto builds its Fernet once per process, so it is rebuilt."""

    def use(*keys: str) -> None:
        settings.GATEWAY_ENCRYPTION_KEYS = list(keys)
        crypto.forget_keys()

    yield use
    crypto.forget_keys()  # before the settings fixture restores the real keys


def reencrypt(**options) -> str:
    out = StringIO()
    call_command("reencrypt_secrets", stdout=out, **options)
    return out.getvalue()


def test_it_moves_every_secret_to_the_new_key_so_the_old_one_can_be_dropped(
    encryption_keys, organization, outsider
):
    encryption_keys(OLD)
    secrets = {
        create_provider_key(organization, secret="sk-first-1111").pk: "sk-first-1111",
        create_provider_key(organization, secret="sk-second-2222").pk: "sk-second-2222",
        create_provider_key(outsider.organization, secret="sk-third-3333").pk: "sk-third-3333",
    }
    updated_at = dict(ProviderKey.objects.values_list("pk", "updated_at"))
    encryption_keys(NEW, OLD)

    output = reencrypt(batch_size=2)

    assert "Re-encrypted 3 provider key secret(s)." in output
    encryption_keys(NEW)
    for provider_key in ProviderKey.objects.all():
        assert provider_key.secret() == secrets[provider_key.pk]
        assert (
            Fernet(NEW.encode()).decrypt(provider_key.secret_encrypted.encode()).decode()
            == secrets[provider_key.pk]
        )
        assert provider_key.updated_at == updated_at[provider_key.pk]
    assert not any(secret in output for secret in secrets.values())


def test_without_it_dropping_the_old_key_makes_secrets_unreadable(encryption_keys, organization):
    encryption_keys(OLD)
    provider_key = create_provider_key(organization)

    encryption_keys(NEW)

    with pytest.raises(crypto.InvalidToken):
        ProviderKey.objects.get(pk=provider_key.pk).secret()


def test_it_reports_zero_when_there_is_nothing_to_do(encryption_keys):
    encryption_keys(NEW, OLD)

    assert "Re-encrypted 0 provider key secret(s)." in reencrypt()


def test_it_stops_on_a_secret_no_key_can_read_and_names_the_key(encryption_keys, organization):
    encryption_keys(OLD)
    provider_key = create_provider_key(organization)
    encryption_keys(NEW)  # OLD already dropped: the secret is lost

    with pytest.raises(CommandError, match=str(provider_key.pk)):
        reencrypt()


def test_it_refuses_an_empty_batch(encryption_keys):
    with pytest.raises(CommandError, match="batch-size"):
        reencrypt(batch_size=0)
