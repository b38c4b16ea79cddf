"""Whose address the gateway records and rate-limits: X-Forwarded-For counts only when it comes from a
proxy named in GATEWAY_TRUSTED_PROXIES; from anyone else it is just a header the client wrote."""

import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.core.exceptions import ImproperlyConfigured

from apps.audit.models import AuditEntry
from apps.outbox.outbox import outbox
from apps.proxy.upstream import close_sessions
from gateway_project.asgi import application, http_app
from gateway_project.client_address import parse_trusted_proxies, trust_forwarded_for
from tests.factories import PASSWORD, create_api_key
from tests.proxy.conftest import (
    add_alias,
    add_provider_key,
    bearer,
)
from tests.servers import ROOT, daphne_server, subprocess_env

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = [{"role": "user", "content": "hi"}]
BALANCER = "10.0.0.2"


def client_for(app, peer: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(peer, 5000)), base_url="http://localhost", timeout=30
    )


def behind_balancer():
    """The gateway as it runs with GATEWAY_TRUSTED_PROXIES=10.0.0.0/8."""
    return trust_forwarded_for(http_app, parse_trusted_proxies(["10.0.0.0/8"]))


async def client_ip_of_one_completion(app, peer: str, secret: str, forwarded_for: str) -> str:
    async with client_for(app, peer) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "fast", "messages": HELLO},
            headers={**bearer(secret), "X-Forwarded-For": forwarded_for},
        )
    await close_sessions()
    assert response.status_code == 200, response.text
    assert outbox().flush()
    entry = await AuditEntry.objects.aget(id=response.headers["x-gateway-request-id"])
    return entry.client_ip


async def failing_logins(app, peer: str, count: int, forwarded_for=lambda i: f"192.0.2.{i % 250}") -> None:
    """``count`` failed sign-ins, each for another email, so only the per-address counter fills."""
    async with client_for(app, peer) as client:
        for i in range(count):
            response = await client.post(
                "/api/v1/auth/login",
                json={"email": f"nobody-{i}@example.com", "password": "wrong-password"},
                headers={"X-Forwarded-For": forwarded_for(i)},
            )
            assert response.status_code == 401, response.text


async def login_status(app, peer: str, email: str, forwarded_for: str | None = None) -> int:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    async with client_for(app, peer) as client:
        response = await client.post(
            "/api/v1/auth/login", json={"email": email, "password": PASSWORD}, headers=headers
        )
    return response.status_code


# --- No trusted proxies (the default) -----------------------------------------------------------------


async def test_a_forged_forwarded_for_does_not_change_the_audited_client_address(routed, gateway_key):
    client_ip = await client_ip_of_one_completion(
        application, "198.51.100.20", gateway_key[1], forwarded_for="203.0.113.66, 10.1.2.3"
    )

    assert client_ip == "198.51.100.20"


async def test_a_forged_forwarded_for_does_not_escape_the_per_address_login_limit(owner, settings):
    per_address_limit = settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4
    await failing_logins(application, "198.51.100.20", per_address_limit)

    assert await login_status(application, "198.51.100.20", owner.user.email, "203.0.113.1") == 429
    # ...and an attacker cannot lock a victim's address out by naming it.
    assert await login_status(application, "192.0.2.1", owner.user.email) == 200


def test_the_gateway_with_no_trusted_proxies_serves_the_app_unwrapped():
    """The lean /v1/ path pays nothing for the feature when it is off."""
    assert trust_forwarded_for(http_app, ()) is http_app


def test_the_run_scripts_do_not_let_daphne_trust_forwarded_headers():
    """``daphne --proxy-headers`` believes X-Forwarded-For from anyone (left-most value)."""
    scripts = [ROOT / "scripts" / "run.sh", *sorted((ROOT / "bench").glob("*.py")), ROOT / "Makefile"]
    for script in scripts:
        text = Path(script).read_text()
        assert not re.search(r"proxy.headers", text), f"{script} passes Daphne --proxy-headers"


# --- Behind a trusted proxy ------------------------------------------------------------------------------


async def test_behind_a_trusted_proxy_the_right_most_untrusted_hop_is_the_client(routed, gateway_key):
    # The client forged the first entry; the balancer appended the address it saw (203.0.113.9), and an
    # inner proxy of ours (10.0.0.7) appended the balancer's.
    client_ip = await client_ip_of_one_completion(
        behind_balancer(), BALANCER, gateway_key[1], forwarded_for="198.51.100.1, 203.0.113.9, 10.0.0.7"
    )

    assert client_ip == "203.0.113.9"


async def test_forwarded_for_from_an_untrusted_peer_is_ignored_even_when_proxies_are_configured(
    routed, gateway_key
):
    client_ip = await client_ip_of_one_completion(
        behind_balancer(), "198.51.100.20", gateway_key[1], forwarded_for="203.0.113.9"
    )

    assert client_ip == "198.51.100.20"


@pytest.mark.parametrize(
    ("forwarded_for", "expected"),
    [
        ("203.0.113.9", "203.0.113.9"),
        ("  203.0.113.9  ,10.0.0.7", "203.0.113.9"),
        ("203.0.113.9:4711", "203.0.113.9"),  # some balancers append the port
        ("[2001:db8::9]:4711", "2001:db8::9"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("10.0.0.8, 10.0.0.7", "10.0.0.8"),  # every hop trusted: the farthest one we can vouch for
        ("203.0.113.9, not-an-address", BALANCER),  # junk where the client should be: keep the peer
        ("203.0.113.9, garbage, 10.0.0.7", "10.0.0.7"),  # nothing left of the junk can be believed
        ("", BALANCER),
    ],
)
async def test_the_client_address_behind_a_trusted_proxy(routed, gateway_key, forwarded_for, expected):
    client_ip = await client_ip_of_one_completion(behind_balancer(), BALANCER, gateway_key[1], forwarded_for)

    assert client_ip == expected


async def test_behind_a_trusted_proxy_the_login_limit_counts_each_client_apart(owner, settings):
    app = behind_balancer()
    per_address_limit = settings.GATEWAY_LOGIN_FAILURE_LIMIT * 4
    await failing_logins(app, BALANCER, per_address_limit, forwarded_for=lambda i: f"1.2.3.{i}, 203.0.113.9")

    assert await login_status(app, BALANCER, owner.user.email, "203.0.113.9") == 429
    assert await login_status(app, BALANCER, owner.user.email, "203.0.113.10") == 200


@pytest.mark.parametrize("value", ["10.0.0.0/33", "not-a-network", "10.0.0.1/8", "10.0.0.0/8;"])
def test_a_bad_trusted_proxies_setting_fails_loudly(value):
    with pytest.raises(ImproperlyConfigured, match="GATEWAY_TRUSTED_PROXIES"):
        parse_trusted_proxies(["192.168.0.0/16", value])


def test_trusted_proxies_may_be_single_addresses_and_ipv6_networks():
    networks = parse_trusted_proxies(["127.0.0.1", " fd00::/8 ", ""])

    assert [str(network) for network in networks] == ["127.0.0.1/32", "fd00::/8"]


# --- The setting, end to end under Daphne ---------------------------------------------------------------


@pytest.fixture
def live_owner(owner):
    """The owner, with a password the live server's real settings can check."""
    owner.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    owner.user.save(update_fields=["password"])
    return owner


def test_daphne_honours_gateway_trusted_proxies(tmp_path, live_owner):
    env = {"GATEWAY_TRUSTED_PROXIES": "127.0.0.0/8", "GATEWAY_LOGIN_FAILURE_LIMIT": "1"}
    with daphne_server(tmp_path, **env) as base_url:
        for i in range(4):  # the per-address limit is 4x the per-account one
            failed = httpx.post(
                f"{base_url}/api/v1/auth/login",
                json={"email": f"nobody-{i}@example.com", "password": "wrong-password"},
                headers={"X-Forwarded-For": f"192.0.2.{i}, 203.0.113.9"},
            )
            assert failed.status_code == 401, failed.text

        def sign_in(forwarded_for: str) -> int:
            return httpx.post(
                f"{base_url}/api/v1/auth/login",
                json={"email": live_owner.user.email, "password": PASSWORD},
                headers={"X-Forwarded-For": forwarded_for},
            ).status_code

        assert sign_in("203.0.113.9") == 429
        assert sign_in("203.0.113.10") == 200


# --- The command line scripts/run.sh serves with --------------------------------------------------------


SERVER_COMMAND = (
    r"^(exec\s+)?(\S*daphne[\"\s]|\S*python\"?\s+-m\s+gateway_project\.(serve|server_processes)\s)"
)


def run_script_daphne_command(port: int) -> list[str]:
    """Daphne's command line as scripts/run.sh writes it, expanded by bash, on ``port``: the test
    serves with the script's own arguments, whatever they become."""
    script = (ROOT / "scripts" / "run.sh").read_text()
    commands = [c.strip() for c in script.replace("\\\n", " ").splitlines() if not c.lstrip().startswith("#")]
    [bin_line] = [c for c in commands if c.startswith("BIN=")]
    # The server: Daphne itself, or the project's Daphne with a drain (python -m gateway_project.serve,
    # or gateway_project.server_processes, which is that server when WEB_CONCURRENCY is 1).
    [daphne] = [c for c in commands if re.match(SERVER_COMMAND, c)]
    daphne = daphne.removeprefix("exec").removesuffix("&").strip()
    expand = f'{bin_line}; HOST=127.0.0.1; PORT={port}; args=({daphne}); printf "%s\\0" "${{args[@]}}"'
    expanded = subprocess.run(["bash", "-c", expand], cwd=ROOT, capture_output=True, text=True, check=True)
    return expanded.stdout.split("\0")[:-1]


def audit_entry_of(request_id: str, data_dir: Path) -> AuditEntry:
    """The entry the server spooled, once an ingest (as on a node without a Celery worker) wrote it."""
    ingest = subprocess.Popen(
        [".venv/bin/python", "manage.py", "outbox_ingest", "--interval", "0.05"],
        cwd=ROOT,
        env=subprocess_env(data_dir),
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not AuditEntry.objects.filter(id=request_id).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        ingest.terminate()
        ingest.wait(20)
    return AuditEntry.objects.get(id=request_id)


def test_the_run_scripts_daphne_records_the_real_peer_whatever_forwarded_for_says(
    tmp_path, organization, upstream
):
    """No trusted proxies (the default): a client's X-Forwarded-For changes nothing, under the server
    exactly as scripts/run.sh starts it (``daphne --proxy-headers`` would record the forged value)."""
    add_provider_key(organization, upstream, secret="sk-upstream-one")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    _, secret = create_api_key(organization)

    with daphne_server(tmp_path, command=run_script_daphne_command) as base_url:
        response = httpx.post(
            f"{base_url}/v1/chat/completions",
            json={"model": "fast", "messages": HELLO},
            headers={**bearer(secret), "X-Forwarded-For": "203.0.113.66, 10.1.2.3"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        entry = audit_entry_of(response.headers["x-gateway-request-id"], tmp_path)

    assert entry.client_ip == "127.0.0.1"


def test_the_run_scripts_daphne_command_line_is_read_from_the_script():
    command = run_script_daphne_command(8123)

    assert Path(command[0]).name == "daphne" or command[1:3] in (
        ["-m", "gateway_project.serve"],
        ["-m", "gateway_project.server_processes"],  # the server itself, or N of them (WEB_CONCURRENCY)
    )
    assert command[-1] == "gateway_project.asgi:application"
    assert ["-p", "8123"] == command[command.index("-p") : command.index("-p") + 2]
