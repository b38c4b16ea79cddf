"""Browser tests: Debian's chromium driven by Playwright against the gateway served by Daphne in a
subprocess, on the test database.

They run in their own pytest invocation (``make test`` runs them after the rest of the suite):
Playwright's sync API keeps an event loop running in the test's thread, which breaks the
pytest-asyncio tests that would follow it in the same process (../shared/STACK-NOTES.md).
tests/conftest.py leaves this folder out of any run that does not name it.

Every page a test opens is photographed with ``screenshot(page, name)`` into
``GATEWAY_SCREENSHOTS_DIR`` (default ``.gateway/screenshots``), the run's artifacts; docs/console.md
shows the ones taken with ``GATEWAY_SCREENSHOTS_DIR=docs/images/console``.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.hashers import make_password

from tests.factories import PASSWORD
from tests.servers import ROOT, daphne_server

# The ORM calls of the tests run beside Playwright's loop in the same thread: allowed here only.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("GATEWAY_SCREENSHOTS_DIR", ROOT / ".gateway" / "screenshots"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            "Browser tests need Debian's chromium: apt-get install -y chromium (make test does it as root)"
        )
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
        ],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1366, "height": 900}}  # a common laptop


@pytest.fixture(scope="session")
def static_root(tmp_path_factory) -> Path:
    """The gateway's static files collected once, as `make run` does, for the live server."""
    root = tmp_path_factory.mktemp("static")
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "gateway_project.settings", "STATIC_ROOT": str(root)},
        check=True,
    )
    return root


@pytest.fixture(scope="module")
def gateway(django_db_setup, static_root, tmp_path_factory) -> str:
    """The base URL of a live gateway on the test database (one per test module)."""
    with daphne_server(tmp_path_factory.mktemp("gateway"), STATIC_ROOT=str(static_root)) as base_url:
        yield base_url


def with_live_password(membership):
    """A user the live server (real settings, PBKDF2) can check the test password of."""
    membership.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    membership.user.save(update_fields=["password"])
    return membership


def sign_in(page, gateway: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{gateway}/console/login/")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(lambda url: "/console/login/" not in url)


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    """A PNG of what the browser shows now (the whole page, or the screen only), kept as the run's
    artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
