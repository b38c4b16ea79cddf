"""The registries a lower app owns and a higher app fills in its ``AppConfig.ready``
(docs/architecture.md, "Calls that go up"). An empty one is not an error where it is read (a lower app
cannot know who should have filled it), so a missing ``ready`` line would fail silently: a member removed
from an organization would keep its teams, a password sign-in would skip ``require_sso``, a secret would
be left out of ``reencrypt_secrets``. This pins that every process that runs ``django.setup()`` has
them filled. Several are filled by dotted path (apps/core/lazy.py ``imported``, so a server process does
not load their modules at start-up): each must name the function it stands for."""

from apps.accounts import password_rules, reclaim
from apps.accounts.page_context import page_contexts
from apps.audit.selectors import spend_since
from apps.audit.services import _written_listeners
from apps.console.access import console_context
from apps.core import stored_secrets
from apps.core.lazy import imported
from apps.events.services import _listeners as written_event_listeners
from apps.experiments.services import feedback_written_entries
from apps.keys import revocation
from apps.limits import spend
from apps.organizations import departures
from apps.organizations.services import account_memberships_end
from apps.outbox.kinds import kinds
from apps.proxy.auth import forget_revoked
from apps.teams.services import team_memberships_end
from apps.webhooks.services import deliveries_start


def registered(function, registry) -> bool:
    """``function`` is in ``registry``, itself or by its dotted path; the path resolves to it."""
    by_path = [entry for entry in registry if isinstance(entry, imported)]
    return function in registry or any(entry.resolve() is function for entry in by_path)


def test_every_registry_is_filled_by_the_app_above_it():
    assert spend._reader is spend_since
    assert registered(team_memberships_end, departures.departures)
    assert registered(account_memberships_end, reclaim.releases)
    assert registered(feedback_written_entries, _written_listeners)
    assert registered(deliveries_start, written_event_listeners)
    assert registered(console_context, page_contexts)
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
