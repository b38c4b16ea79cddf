"""The console's provider key pages: list with the circuit breaker, add (the secret write-only), edit,
disable, rotate, delete; roles, tenancy, CSRF and refused input."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.providers.models import ProviderKey
from tests.console.conftest import post_form
from tests.factories import create_provider_key
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

LIST = "/console/provider-keys/"
SECRET = "sk-upstream-console-0000-7Qx9"


def page_of(key: ProviderKey) -> str:
    return f"{LIST}{key.id}/"


def attempt_entry(organization, key: ProviderKey, outcomes, *, ago: timedelta = timedelta(seconds=5)):
    """An audit entry whose upstream attempts all went to ``key``, with these outcomes in order."""
    return AuditEntry.objects.create(
        id=uuid.uuid4(),
        organization=organization,
        created_at=timezone.now() - ago,
        endpoint="chat.completions",
        status=502,
        attempts=[
            {
                "provider": key.provider,
                "provider_key_id": str(key.id),
                "model": "gpt-4o-mini",
                "alias": None,
                "status": status,
                "outcome": outcome,
                "latency_ms": 1.0,
                "error": None,
            }
            for outcome, status in outcomes
        ],
    )


def test_a_member_lists_the_keys_with_their_hint_and_breaker_and_never_another_organizations(
    console_for, organization, outsider
):
    ours = create_provider_key(organization, secret=SECRET, name="primary", weight=3, data_region="eu")
    create_provider_key(outsider.organization, secret="sk-theirs-000000000000", name="their-key")
    client = console_for(organization, "member")
    page = client.get(LIST).content.decode()
    assert "primary" in page and "…7Qx9" in page and ">eu<" in page and ">3<" in page
    assert "closed (no recent attempts)" in page
    assert SECRET not in page
    assert "their-key" not in page
    assert "Add a provider key" not in page  # members read only
    detail = client.get(page_of(ours)).content.decode()
    assert "…7Qx9" in detail and SECRET not in detail
    assert "<form" not in detail.split("</header>")[1]  # nothing to change


def test_the_breaker_shows_open_after_repeated_failures_and_closed_after_a_success(
    console_for, organization, settings
):
    settings.GATEWAY_BREAKER_FAILURES = 3
    settings.GATEWAY_BREAKER_COOLDOWN_SECONDS = 30
    failing = create_provider_key(organization, name="failing")
    recovered = create_provider_key(organization, name="recovered")
    tried_again = create_provider_key(organization, name="tried-again")
    attempt_entry(organization, failing, [("connection_error", None), ("upstream_error", 503)])
    attempt_entry(organization, failing, [("timeout", None)])
    attempt_entry(organization, recovered, [("timeout", None)] * 3, ago=timedelta(seconds=20))
    attempt_entry(organization, recovered, [("ok", 200)], ago=timedelta(seconds=10))
    attempt_entry(organization, tried_again, [("timeout", None)] * 3, ago=timedelta(minutes=2))
    client = console_for(organization, "member")

    failing_page = client.get(page_of(failing)).content.decode()
    assert "open: cooling down" in failing_page and "3 failures in a row" in failing_page
    assert "timeout" in failing_page
    assert "status-closed" in client.get(page_of(recovered)).content.decode()
    # The cooldown is over and no attempt has proven it yet: one more failure opens it again.
    assert "half-open" in client.get(page_of(tried_again)).content.decode()
    assert "open: cooling down" in client.get(LIST).content.decode()


def test_a_429_cools_the_key_down_at_once(console_for, organization):
    key = create_provider_key(organization, name="limited")
    attempt_entry(organization, key, [("upstream_error", 429)])
    client = console_for(organization, "member")
    assert "open: cooling down" in client.get(page_of(key)).content.decode()


def test_another_organizations_attempts_do_not_count(console_for, organization, outsider):
    key = create_provider_key(organization, name="ours")
    attempt_entry(outsider.organization, key, [("timeout", None)] * 5)  # a forged id in their log
    client = console_for(organization, "member")
    assert "closed (no recent attempts)" in client.get(page_of(key)).content.decode()


def test_an_admin_adds_a_key_whose_secret_is_never_shown_again(
    console_for, organization, django_capture_on_commit_callbacks
):
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            f"{LIST}new",
            f"{LIST}new",
            {
                "provider": "openai",
                "name": "main",
                "key": SECRET,
                "data_region": "us",
                "weight": "2.5",
                "supports_stream_usage": ["false", "true"],
            },
        )
    assert response.status_code == 302
    key = ProviderKey.objects.get(organization=organization, name="main")
    assert (key.secret(), key.key_hint, key.weight, key.data_region, key.supports_stream_usage) == (
        SECRET,
        "7Qx9",
        2.5,
        "us",
        True,
    )
    assert response["Location"] == page_of(key)
    page = client.get(page_of(key)).content.decode()
    assert "never shown again" in page and "…7Qx9" in page and SECRET not in page


def test_a_refused_add_says_why_saves_nothing_and_does_not_echo_the_secret(console_for, organization):
    client = console_for(organization, "admin")
    response = post_form(
        client,
        f"{LIST}new",
        f"{LIST}new",
        {"provider": "azure_openai", "key": SECRET, "data_region": "EU!", "weight": "-1"},
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "data_region" in page and "weight" in page and "base_url" in page and "api_version" in page
    assert SECRET not in page
    assert not ProviderKey.objects.filter(organization=organization).exists()


def test_an_admin_changes_weight_region_and_disables_a_key(
    console_for, organization, django_capture_on_commit_callbacks
):
    key = create_provider_key(organization, name="old", weight=1, data_region="us")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(
            client,
            page_of(key),
            f"{page_of(key)}edit",
            {
                "name": "renamed",
                "weight": "0",
                "data_region": "eu",
                "api_version": "",
                "base_url": "",
                "key": "",
                "is_active": ["false", "true"],
                "supports_stream_usage": ["false"],
            },
        )
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.weight, key.data_region, key.is_active, key.supports_stream_usage) == (
        "renamed",
        0,
        "eu",
        True,
        False,
    )
    # The one-button form changes one field.
    response = post_form(client, page_of(key), f"{page_of(key)}edit", {"is_active": "false"})
    assert response.status_code == 302
    key.refresh_from_db()
    assert not key.is_active and key.name == "renamed" and key.data_region == "eu"
    assert "disabled" in client.get(LIST).content.decode()


def test_a_new_base_url_needs_the_secret_and_a_secret_alone_points_to_rotate(console_for, organization):
    key = create_provider_key(organization, secret=SECRET, name="kept")
    client = console_for(organization, "admin")
    response = post_form(
        client, page_of(key), f"{page_of(key)}edit", {"base_url": "https://api.example.com/v1", "key": ""}
    )
    assert response.status_code == 400
    assert "needs the secret again" in response.content.decode()
    response = post_form(client, page_of(key), f"{page_of(key)}edit", {"key": "sk-another-secret-0000"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "rotate" in page and "sk-another-secret-0000" not in page
    key.refresh_from_db()
    assert key.base_url == "" and key.secret() == SECRET


def test_an_admin_rotates_a_key_in_place(console_for, organization, django_capture_on_commit_callbacks):
    key = create_provider_key(organization, secret=SECRET, name="rotated", weight=4, data_region="eu")
    client = console_for(organization, "admin")
    replacement = "sk-upstream-replacement-0000-NEW1"
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page_of(key), f"{page_of(key)}rotate", {"key": replacement})
    assert response.status_code == 302
    rotated = ProviderKey.objects.get(pk=key.pk)  # same id, weight and region
    assert (rotated.secret(), rotated.key_hint, rotated.weight, rotated.data_region) == (
        replacement,
        "NEW1",
        4,
        "eu",
    )
    assert rotated.rotated_at is not None
    page = client.get(page_of(key)).content.decode()
    assert "…NEW1" in page and replacement not in page and SECRET not in page


def test_a_rotate_without_a_usable_secret_is_refused(console_for, organization):
    key = create_provider_key(organization, secret=SECRET)
    client = console_for(organization, "admin")
    response = post_form(client, page_of(key), f"{page_of(key)}rotate", {"key": "ab"})
    assert response.status_code == 400
    assert "at least 4 characters" in response.content.decode()
    key.refresh_from_db()
    assert key.secret() == SECRET and key.rotated_at is None


@pytest.mark.parametrize("path", ["new", "{id}/rotate", "{id}/edit"])
def test_a_refused_secret_is_never_shown_back(console_for, organization, path):
    key = create_provider_key(organization, secret=SECRET)
    client = console_for(organization, "admin")
    refused = "sk-refused-console-secret-5e5e" + "z" * 4096  # over the 4096 characters a secret may have
    data = {"key": refused, "base_url": "https://8.8.8.8/v1"}
    if path == "new":
        data.update(provider="openai", data_region="us")
    response = post_form(client, LIST, LIST + path.format(id=key.id), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "no more than 4096 characters" in page and "sk-refused-console-secret-5e5e" not in page
    key.refresh_from_db()
    assert key.secret() == SECRET and ProviderKey.objects.filter(organization=organization).count() == 1


def test_an_admin_deletes_a_key(console_for, organization, django_capture_on_commit_callbacks):
    key = create_provider_key(organization, name="gone")
    client = console_for(organization, "admin")
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = post_form(client, page_of(key), f"{page_of(key)}delete", {})
    assert response.status_code == 302 and response["Location"] == LIST
    assert not ProviderKey.objects.filter(pk=key.pk).exists()


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("new", {"provider": "openai", "key": SECRET, "data_region": "us"}),
        ("{id}/edit", {"weight": "9", "is_active": "false"}),
        ("{id}/rotate", {"key": "sk-sneaky-replacement-00"}),
        ("{id}/delete", {}),
    ],
)
def test_a_member_is_refused_every_change_on_the_server(console_for, organization, path, data):
    key = create_provider_key(organization, secret=SECRET, name="kept", weight=1)
    client = console_for(organization, "member")
    assert client.get(f"{LIST}new").status_code == 403
    response = post_form(client, LIST, LIST + path.format(id=key.id), data)
    assert response.status_code == 403
    key.refresh_from_db()
    assert (key.weight, key.is_active, key.secret()) == (1, True, SECRET)
    assert ProviderKey.objects.filter(organization=organization).count() == 1


@pytest.mark.parametrize("suffix", ["", "edit", "rotate", "delete"])
def test_another_organizations_key_answers_404(console_for, organization, outsider, suffix):
    theirs = create_provider_key(outsider.organization, secret=SECRET, name="theirs", weight=1)
    client = console_for(organization, "owner")
    path = f"{page_of(theirs)}{suffix}"
    data = {"weight": "5", "key": "sk-stolen-replacement-000"}
    response = client.get(path) if not suffix else post_form(client, LIST, path, data)
    assert response.status_code == 404
    theirs.refresh_from_db()
    assert (theirs.weight, theirs.secret()) == (1, SECRET)


def test_a_post_without_the_csrf_token_is_refused(console_for, organization):
    key = create_provider_key(organization, name="kept")
    client = console_for(organization, "owner")
    response = client.post(f"{page_of(key)}delete", {})
    assert response.status_code == 403
    assert ProviderKey.objects.filter(pk=key.pk).exists()
