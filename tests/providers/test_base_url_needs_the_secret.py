"""One rule, in the provider key service: a provider key's base URL changes only with its secret, so a
stored secret is never sent to an address it was not entered for. The API and the admin console
both answer with that rule's own words, whichever path the change comes from."""

import html

import pytest
from django.test import Client

from apps.providers.models import ProviderKey
from tests.factories import UserFactory, create_provider_key
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://8.8.8.8/v1"  # an address literal: no DNS, and it passes the upstream check


@pytest.fixture
def provider_key(organization) -> ProviderKey:
    return create_provider_key(organization, secret="sk-old-secret-1111", weight=3, data_region="eu")


@pytest.fixture
def admin_browser(db) -> Client:
    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))
    return browser


def admin_change(browser: Client, provider_key: ProviderKey, **fields):
    form = {
        "name": "",
        "weight": "3",
        "data_region": "eu",
        "base_url": "",
        "api_version": "",
        "supports_stream_usage": "on",
        "is_active": "on",
        "secret": "",
        **fields,
    }
    return browser.post(f"/admin/providers/providerkey/{provider_key.id}/change/", form)


def test_the_admin_console_refuses_a_new_base_url_without_the_secret_in_the_services_words(
    session_client, admin_browser, provider_key
):
    from_the_api = session_client.patch(
        f"/api/v1/provider-keys/{provider_key.id}", {"base_url": PUBLIC_URL}, format="json"
    )
    rule = assert_error(from_the_api, 400, "key_required")["fields"]["key"][0]

    from_the_admin = admin_change(admin_browser, provider_key, base_url=PUBLIC_URL)

    assert from_the_admin.status_code == 200  # the form again, with what was typed
    assert html.escape(rule) in from_the_admin.content.decode()
    provider_key.refresh_from_db()
    assert (provider_key.base_url, provider_key.secret()) == ("", "sk-old-secret-1111")


def test_the_admin_console_keeps_the_base_url_when_only_other_fields_change(admin_browser, provider_key):
    response = admin_change(admin_browser, provider_key, weight="7")

    assert response.status_code == 302
    provider_key.refresh_from_db()
    assert (provider_key.weight, provider_key.secret()) == (7, "sk-old-secret-1111")
