"""A change made in the Django admin reaches the proxy on its very next request, on every worker;
and a change that bumped nothing (a write around the services) within GATEWAY_CONFIG_MAX_AGE_SECONDS."""

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from apps.organizations import services as organization_services
from apps.organizations.models import Organization
from apps.proxy.runtime import runtime
from tests.factories import UserFactory
from tests.management.admin_forms import admin_post, form_errors
from tests.proxy.conftest import FakeClock, add_alias_async, add_provider_key_async, bearer, entries
from tests.test_deployment import clean_env, manage

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_TEXT = "write to ada@example.com about the launch"
CHAT = {"model": "fast", "messages": [{"role": "user", "content": SECRET_TEXT}]}


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


async def change_organization(browser: Client, organization, **changes) -> None:
    url = f"/admin/organizations/organization/{organization.id}/change/"
    response = await database_sync_to_async(admin_post)(browser, url, **changes)
    assert response.status_code == 302, form_errors(response)


async def update_organization(organization, **changes) -> None:
    await database_sync_to_async(organization_services.organization_update)(
        organization=organization, data=changes
    )


async def test_an_admin_change_of_the_allowed_regions_reaches_the_next_proxy_request(
    proxy, organization, make_upstream, gateway_key, admin_browser
):
    us, eu = make_upstream("us"), make_upstream("eu")
    await add_provider_key_async(organization, us, data_region="us")
    await add_provider_key_async(organization, eu, data_region="eu")
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await update_organization(organization, allowed_data_regions=["us"])
    assert (
        await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))
    ).status_code == 200

    await change_organization(admin_browser, organization, allowed_data_regions="eu")
    for _ in range(3):
        response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))
        assert response.status_code == 200

    assert (len(us.requests), len(eu.requests)) == (1, 3)

    await change_organization(admin_browser, organization, allowed_data_regions="ap-south")
    response = await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_key_in_region"
    assert (len(us.requests), len(eu.requests)) == (1, 3)


@pytest.mark.parametrize(("before", "after"), [("full", "metadata"), ("metadata", "full")])
async def test_an_admin_change_of_body_logging_reaches_the_next_proxy_request(
    proxy, organization, upstream, gateway_key, admin_browser, before, after
):
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await update_organization(organization, log_bodies=before)
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    await change_organization(admin_browser, organization, log_bodies=after)
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    first, second = await entries()
    assert (first.body_mode, second.body_mode) == (before, after)
    for entry in (first, second):
        kept = entry.body_mode == "full"
        assert (SECRET_TEXT in entry.request_body) is kept
        assert ("Hello from upstream" in entry.response_body) is kept


# --- the safety net: a maximum age ---------------------------------------------------------


@pytest.fixture
def clock():
    fake = FakeClock()
    real, runtime.configs.clock = runtime.configs.clock, fake
    yield fake
    runtime.configs.clock = real


async def test_a_change_that_bumped_nothing_reaches_the_proxy_once_the_configuration_is_too_old(
    proxy, organization, upstream, gateway_key, clock, settings
):
    settings.GATEWAY_CONFIG_MAX_AGE_SECONDS = 60
    await add_provider_key_async(organization, upstream)
    await add_alias_async(organization, "fast", ("openai", "gpt-4o-mini"))
    await update_organization(organization, log_bodies="full")
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))
    # A write around the services (a SQL console, a lost generation bump): nothing tells the workers.
    await Organization.objects.filter(pk=organization.pk).aupdate(log_bodies="metadata")

    clock.now += 59
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))
    clock.now += 2
    await proxy.post("/v1/chat/completions", json=CHAT, headers=bearer(gateway_key[1]))

    assert [entry.body_mode for entry in await entries()] == ["full", "full", "metadata"]


@pytest.mark.parametrize("value", ["0", "100000"])
def test_a_configuration_max_age_out_of_range_fails_at_start_up(tmp_path, value):
    result = manage("check", env=clean_env(tmp_path, GATEWAY_CONFIG_MAX_AGE_SECONDS=value))

    assert result.returncode != 0
    assert "GATEWAY_CONFIG_MAX_AGE_SECONDS must be between 1 and 86400" in result.stderr
