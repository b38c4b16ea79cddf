import hashlib
import re

import pytest
from django.test import Client

from apps.keys.models import ApiKey
from tests.factories import TeamFactory, UserFactory


@pytest.fixture
def admin_browser(db) -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_admin_console_creates_a_key_and_shows_the_secret_once(admin_browser, organization):
    response = admin_browser.post(
        "/admin/keys/apikey/add/",
        {"organization": organization.id, "name": "from the console", "permissions": ["proxy:chat"]},
    )
    assert response.status_code == 200
    page = response.content.decode()
    secret = re.search(r'data-testid="api-key-secret">(sk_live_[\w-]{43})<', page).group(1)
    api_key = ApiKey.objects.get(name="from the console")
    assert api_key.key_digest == hashlib.sha256(secret.encode()).hexdigest()
    assert api_key.permissions == ["proxy:chat"]

    detail = admin_browser.get(f"/admin/keys/apikey/{api_key.id}/change/")
    assert detail.status_code == 200
    assert secret not in detail.content.decode()
    assert api_key.key_digest not in detail.content.decode()


def test_the_admin_console_refuses_a_team_of_another_organization(admin_browser, organization, outsider):
    foreign_team = TeamFactory(organization=outsider.organization)
    response = admin_browser.post(
        "/admin/keys/apikey/add/",
        {"organization": organization.id, "team": foreign_team.id, "name": "x", "permissions": ["proxy:llm"]},
    )
    assert response.status_code == 200
    assert "This team belongs to another organization." in response.content.decode()
    assert not ApiKey.objects.exists()


def test_the_admin_console_revokes_keys(admin_browser, api_key):
    key, _ = api_key
    response = admin_browser.post(
        "/admin/keys/apikey/", {"action": "revoke_selected", "_selected_action": [key.id]}, follow=True
    )
    assert response.status_code == 200
    key.refresh_from_db()
    assert key.status == "revoked"
