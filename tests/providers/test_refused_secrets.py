"""A secret that a provider key's input refuses (apps/providers/inputs.py: too long here) is never
repeated: not in the API's answer, not on the admin's page, not in a log line, whichever write it was
sent to. Its message names the rule, never the value."""

import logging

import pytest
from django.test import Client

from apps.core.errors import InvalidRequest
from apps.providers import services
from apps.providers.models import ProviderKey
from tests.factories import UserFactory, create_provider_key
from tests.management.errors import assert_error

pytestmark = pytest.mark.django_db

URL = "/api/v1/provider-keys"
MARK = "sk-refused-secret-7Qx9"  # what must never be seen again
REFUSED = MARK + "z" * 4096  # over the 4096 characters a secret may have
PUBLIC_URL = "https://8.8.8.8/v1"  # an address literal: no DNS, and it passes the upstream check


@pytest.fixture
def provider_key(organization) -> ProviderKey:
    return create_provider_key(organization, secret="sk-old-secret-1111")


@pytest.fixture
def admin_browser(db) -> Client:
    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))
    return browser


def assert_never_repeated(text: str, caplog) -> None:
    assert MARK not in text
    assert not [record for record in caplog.records if MARK in record.getMessage()]


@pytest.mark.parametrize(
    "send",
    [
        lambda client, key: client.post(
            URL, {"provider": "openai", "key": REFUSED, "data_region": "us"}, format="json"
        ),
        lambda client, key: client.patch(
            f"{URL}/{key.id}", {"base_url": PUBLIC_URL, "key": REFUSED}, format="json"
        ),
        lambda client, key: client.post(f"{URL}/{key.id}/rotate", {"key": REFUSED}, format="json"),
    ],
    ids=["create", "change", "rotate"],
)
def test_the_api_refuses_the_secret_without_repeating_it(session_client, provider_key, caplog, send):
    with caplog.at_level(logging.DEBUG):
        response = send(session_client, provider_key)

    error = assert_error(response, 400, "validation_error")
    assert error["fields"] == {"key": ["Ensure this field has no more than 4096 characters."]}
    assert_never_repeated(response.content.decode(), caplog)
    assert ProviderKey.objects.get().secret() == "sk-old-secret-1111"


@pytest.mark.parametrize(
    "write",
    [
        lambda key: services.provider_key_create(
            organization=key.organization, data={"provider": "openai", "key": REFUSED, "data_region": "us"}
        ),
        lambda key: services.provider_key_update(
            provider_key=key, data={"base_url": PUBLIC_URL, "key": REFUSED}
        ),
        lambda key: services.provider_key_rotate(provider_key=key, data={"key": REFUSED}),
    ],
    ids=["create", "update", "rotate"],
)
def test_the_services_refusal_carries_the_rule_and_not_the_secret(provider_key, write):
    with pytest.raises(InvalidRequest) as refused:
        write(provider_key)

    error = refused.value
    assert error.code == "validation_error"
    assert MARK not in f"{error.message} {error.fields}"


@pytest.mark.parametrize("adding", [True, False], ids=["add", "change"])
def test_the_admin_console_refuses_the_secret_on_its_field_without_repeating_it(
    admin_browser, organization, provider_key, caplog, adding
):
    form = {
        "provider": "openai",
        "name": "",
        "weight": "1",
        "data_region": "us",
        "base_url": "",
        "api_version": "",
        "supports_stream_usage": "on",
        "is_active": "on",
        "secret": REFUSED,
    }
    if adding:
        page = "/admin/providers/providerkey/add/"
        form["organization"] = organization.id
    else:
        page = f"/admin/providers/providerkey/{provider_key.id}/change/"

    with caplog.at_level(logging.DEBUG):
        response = admin_browser.post(page, form)

    assert response.status_code == 200  # the form again
    errors = response.context["adminform"].form.errors
    assert errors["secret"] == ["Ensure this field has no more than 4096 characters."]
    assert_never_repeated(response.content.decode(), caplog)
    assert ProviderKey.objects.get().secret() == "sk-old-secret-1111"
