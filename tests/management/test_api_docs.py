"""The interactive API docs (/api/v1/docs, /api/v1/redoc) load every asset from the gateway itself
(drf-spectacular-sidecar, served like the admin's static files), so they work without internet."""

import re
import shutil

import pytest
from django.core.management import call_command
from django.test import Client

PAGES = ["/api/v1/docs", "/api/v1/redoc"]
# Every address an HTML attribute or the page's script names.
ADDRESS = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\burl\s*:\s*["']([^"']+)["']""")


def addresses(html: str) -> list[str]:
    return [first or second for first, second in ADDRESS.findall(html)]


@pytest.fixture
def collected_static(settings, tmp_path):
    """``manage.py collectstatic`` into a fresh STATIC_ROOT, as ``make run`` and a deployment do;
    WhiteNoise serves from there. Removed afterwards: the run's secret scan reads every file left
    under the temporary directory, and third-party bundles are not the suite's to scan."""
    settings.STATIC_ROOT = str(tmp_path / "static")
    call_command("collectstatic", interactive=False, verbosity=0)
    yield
    shutil.rmtree(settings.STATIC_ROOT)


@pytest.mark.parametrize("page", PAGES)
def test_the_docs_page_names_no_address_outside_the_gateway(page):
    response = Client().get(page)

    assert response.status_code == 200
    html = response.content.decode()
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", html, re.IGNORECASE), "an external address"
    found = addresses(html)
    assert any(address.startswith("/static/drf_spectacular_sidecar/") for address in found), found
    assert all(address.startswith(("/static/", "/api/v1/schema")) for address in found), found


@pytest.mark.parametrize("page", PAGES)
def test_every_asset_of_the_docs_page_is_served_by_the_gateway(collected_static, page):
    client = Client()  # a new client: WhiteNoise reads STATIC_ROOT when the middleware starts
    html = client.get(page).content.decode()

    assets = [address for address in addresses(html) if address.startswith("/static/")]

    assert assets
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
        assert b"".join(response.streaming_content) if response.streaming else response.content
