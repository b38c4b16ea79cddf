"""manage.py reencrypt_secrets moves the secrets of sign-in to the new encryption key: an SSO
connection's client secret and the two-factor secrets allauth keeps (the TOTP key, the recovery codes'
seed). After it, the old key can be dropped: single sign-on still authenticates at the identity
provider's token endpoint, the authenticator app's codes still verify, and recovery codes still work
(and those already used stay used)."""

import base64
import hashlib
import hmac
import struct
import time
from io import StringIO

import pytest
import time_machine
from allauth.mfa.models import Authenticator
from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from apps.core import crypto
from apps.sso.models import SsoConnection
from tests.factories import PASSWORD, MembershipFactory, OrganizationFactory, UserFactory
from tests.sso.flow import browser, connect, signed_in_user_id, sso_through_api

pytestmark = pytest.mark.django_db

LOGIN = "/api/v1/auth/login"
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


def totp(secret: str, at: float) -> str:
    """RFC 6238 as authenticator apps compute it (HMAC-SHA1, 30 s steps, 6 digits), written out here
    rather than borrowed from allauth, so the test checks the stored key, not allauth against itself."""
    key = base64.b32decode(secret, casefold=True)
    digest = hmac.new(key, struct.pack(">Q", int(at) // 30), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    return f"{(struct.unpack('>I', digest[offset : offset + 4])[0] & 0x7FFFFFFF) % 10**6:06d}"


def with_two_factor(user) -> tuple[str, list[str]]:
    """TOTP and recovery codes set up for ``user`` as the console's pages do: (key, recovery codes)."""
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    return secret, RecoveryCodes.activate(user).generate_codes()


def login(api_client, user, code: str) -> int:
    body = {"email": user.email, "password": PASSWORD, "code": code}
    return api_client.post(LOGIN, body, format="json").status_code


@pytest.fixture
def acme():
    return OrganizationFactory(name="Acme", slug="acme", plan="growth")


def test_sign_in_secrets_move_to_the_new_key_so_the_old_one_can_be_dropped(
    encryption_keys, acme, oidc_provider, api_client
):
    encryption_keys(OLD)
    connection = connect(acme, oidc_provider)
    user = MembershipFactory(organization=acme, user=UserFactory(email="dana@acme.test")).user
    secret, codes = with_two_factor(user)
    assert login(api_client, user, codes[0]) == 200  # used before the rotation
    other = MembershipFactory(organization=acme, user=UserFactory(email="erin@acme.test")).user
    other_secret, _ = with_two_factor(other)
    updated_at = SsoConnection.objects.get(pk=connection.pk).updated_at
    encryption_keys(NEW, OLD)

    output = reencrypt(batch_size=1)  # one row per transaction: the batches' seams are crossed

    assert "Re-encrypted 1 SSO connection secret(s)." in output
    assert "Re-encrypted 4 two-factor authenticator secret(s)." in output  # TOTP and recovery codes, twice
    encryption_keys(NEW)  # the old key dropped
    stored = SsoConnection.objects.get(pk=connection.pk)
    assert Fernet(NEW.encode()).decrypt(stored.client_secret_encrypted.encode()).decode() == (
        oidc_provider.client_secret
    )
    assert stored.updated_at == updated_at
    assert stored.client_secret_hint == oidc_provider.client_secret[-4:]
    for authenticator in Authenticator.objects.filter(user=user):
        token = authenticator.data["secret" if authenticator.type == Authenticator.Type.TOTP else "seed"]
        Fernet(NEW.encode()).decrypt(token.encode())  # readable with the new key alone
    # Single sign-on: the token endpoint checks the client secret the gateway decrypts and sends.
    client = browser()
    response = sso_through_api(api_client, oidc_provider, client)
    assert response.status_code == 302 and response["Location"] == "/console/"
    assert signed_in_user_id(client) is not None
    # Two-factor: the app's current code, then recovery codes (the one used before stays used).
    with time_machine.travel(time.time(), tick=False):
        assert login(api_client, user, totp(secret, time.time())) == 200
        assert login(api_client, other, totp(other_secret, time.time())) == 200
    assert login(api_client, user, codes[0]) == 401
    assert login(api_client, user, codes[1]) == 200
    assert login(api_client, user, codes[1]) == 401  # once, ever
    assert not any(value in output for value in (oidc_provider.client_secret, secret, other_secret, *codes))


def test_without_it_dropping_the_old_key_makes_sign_in_secrets_unreadable(
    encryption_keys, acme, oidc_provider
):
    encryption_keys(OLD)
    connection = connect(acme, oidc_provider)
    user = MembershipFactory(organization=acme).user
    with_two_factor(user)

    encryption_keys(NEW)

    with pytest.raises(crypto.InvalidToken):
        SsoConnection.objects.get(pk=connection.pk).client_secret()
    totp_row = Authenticator.objects.get(user=user, type=Authenticator.Type.TOTP)
    with pytest.raises(crypto.InvalidToken):
        crypto.decrypt(totp_row.data["secret"])
    # The API's login cannot check the code then: it refuses it (401), never a 500.
    assert login(APIClient(), user, "123456") == 401


def test_recovery_codes_migrated_from_another_library_move_too(encryption_keys, acme, api_client):
    encryption_keys(OLD)
    user = MembershipFactory(organization=acme).user
    TOTP.activate(user, generate_totp_secret())
    migrated = ["12345678", "87654321"]
    Authenticator.objects.create(
        user=user,
        type=Authenticator.Type.RECOVERY_CODES,
        data={"migrated_codes": [crypto.encrypt(code) for code in migrated]},
    )
    encryption_keys(NEW, OLD)

    assert "Re-encrypted 2 two-factor authenticator secret(s)." in reencrypt()

    encryption_keys(NEW)
    assert login(api_client, user, migrated[1]) == 200
    assert login(api_client, user, migrated[1]) == 401


def test_running_it_twice_changes_nothing_it_should_not(encryption_keys, acme, api_client):
    encryption_keys(OLD)
    user = MembershipFactory(organization=acme).user
    _, codes = with_two_factor(user)
    encryption_keys(NEW, OLD)

    first, second = reencrypt(), reencrypt()

    assert "Re-encrypted 2 two-factor authenticator secret(s)." in first
    assert "Re-encrypted 2 two-factor authenticator secret(s)." in second
    encryption_keys(NEW)
    assert login(api_client, user, codes[0]) == 200


def test_it_stops_on_a_two_factor_secret_no_key_can_read_and_names_its_row(encryption_keys, acme):
    encryption_keys(OLD)
    user = MembershipFactory(organization=acme).user
    TOTP.activate(user, generate_totp_secret())
    authenticator = Authenticator.objects.get(user=user)
    encryption_keys(NEW)  # OLD already dropped: the secret is lost

    with pytest.raises(CommandError, match=f"two-factor authenticator {authenticator.pk} "):
        reencrypt()
