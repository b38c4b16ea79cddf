"""The registries a lower app owns and a higher app fills in its ``AppConfig.ready``
(docs/architecture.md, "Calls that go up"). An empty one is not an error where it is read (a lower app
cannot know who should have filled it), so a missing ``ready`` line would fail silently: a member removed
from an organization would keep its teams, a password sign-in would skip ``require_sso``, a secret would
be left out of ``reencrypt_secrets``. This pins that every process that runs ``django.setup()`` has
them filled."""

from apps.accounts import password_rules, reclaim
from apps.audit.selectors import spend_since
from apps.core import stored_secrets
from apps.keys import revocation
from apps.limits import spend
from apps.organizations import departures
from apps.organizations.services import account_memberships_end
from apps.outbox.kinds import kinds
from apps.proxy.auth import forget_revoked
from apps.teams.services import team_memberships_end


def test_every_registry_is_filled_by_the_app_above_it():
    assert spend._reader is spend_since
    assert team_memberships_end in departures.departures
    assert account_memberships_end in reclaim.releases
    assert len(password_rules.rules) == 1  # single sign-on's require_sso
    assert {"audit", "event", "stored_response"} <= kinds.keys()
    assert revocation._listeners.count(forget_revoked) == 1


def test_reencrypt_secrets_knows_every_encrypted_field():
    found = {label: secrets.fields for label, secrets in stored_secrets.registered.items()}

    assert found == {
        "two-factor authenticator": found["two-factor authenticator"],
        "provider key": ("secret_encrypted",),
        "SSO connection": ("client_secret_encrypted",),
        "stored response": ("content_encrypted",),
        "webhook": ("secret_encrypted", "previous_secret_encrypted"),
    }
