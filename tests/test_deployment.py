"""How the gateway starts: production settings, the embedded default, and its Celery worker."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from django.db import connection

from apps.accounts.models import User
from apps.organizations.models import Organization
from tests.servers import free_port, subprocess_env, until

ROOT = Path(__file__).resolve().parent.parent
ENV_TO_DROP = (
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "SECRET_KEY",
    "DJANGO_SETTINGS_MODULE",
    "DEBUG",
)


def clean_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_TO_DROP and not k.startswith("GATEWAY_")}
    env.update(GATEWAY_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="gateway_project.settings", **extra)
    return env


def manage(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def production_env(data_dir: Path, **extra: str) -> dict[str, str]:
    production = {
        "SECRET_KEY": "x" * 20 + "production-secret-that-is-long-and-random-9f8e7d",
        "ALLOWED_HOSTS": "gateway.example.com",
        "GATEWAY_HTTPS": "true",
        "DATABASE_URL": "postgres://gateway@db.internal:5432/gateway",
        "REDIS_URL": "redis://cache.internal:6379/0",
        "GATEWAY_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    }
    return clean_env(data_dir, **{**production, **extra})


def test_the_deploy_check_passes_with_production_settings(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_the_deploy_check_warns_when_the_secret_key_also_encrypts_provider_keys(tmp_path):
    env = production_env(tmp_path)
    del env["GATEWAY_ENCRYPTION_KEYS"]

    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)

    assert result.returncode != 0
    assert "gateway.W001" in result.stderr + result.stdout
    assert "GATEWAY_ENCRYPTION_KEYS" in result.stderr + result.stdout
    # Outside --deploy (the embedded default, development) nothing is reported.
    assert manage("check", "--fail-level", "WARNING", env=env).returncode == 0


def test_the_deploy_check_refuses_encryption_keys_that_are_not_fernet_keys(tmp_path):
    env = production_env(tmp_path, GATEWAY_ENCRYPTION_KEYS=f"{Fernet.generate_key().decode()},not-a-key")

    result = manage("check", "--deploy", env=env)

    assert result.returncode != 0
    assert "gateway.E002" in result.stderr + result.stdout
    assert "not-a-key" not in result.stderr + result.stdout  # a key is a secret, even a broken one


def test_trusted_proxies_that_are_not_networks_fail_loudly_at_start_up(tmp_path):
    result = manage("check", env=clean_env(tmp_path, GATEWAY_TRUSTED_PROXIES="10.0.0.0/8,proxy.internal"))
    assert result.returncode != 0
    assert "GATEWAY_TRUSTED_PROXIES" in result.stderr


def test_a_bad_setting_fails_loudly_at_start_up(tmp_path):
    result = manage("check", env=clean_env(tmp_path, GATEWAY_DEFAULT_LOG_BODIES="everything"))
    assert result.returncode != 0
    assert "GATEWAY_DEFAULT_LOG_BODIES must be one of" in result.stderr


def test_the_embedded_default_needs_no_configuration(tmp_path):
    env = clean_env(tmp_path)
    probe = (
        "from django.conf import settings; from django.db import connection;"
        "cursor = connection.cursor(); cursor.execute('PRAGMA journal_mode');"
        "print(settings.DATABASES['default']['ENGINE'], cursor.fetchone()[0],"
        " settings.CACHES['default']['BACKEND'], settings.CELERY_BROKER_URL)"
    )
    result = manage("shell", "-v", "0", "-c", probe, env=env)
    assert result.returncode == 0, result.stderr
    engine, journal, cache, broker = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert journal == "wal"
    assert cache.endswith("LocMemCache")
    assert broker == "filesystem://"
    # The generated secret is kept, private, for the next start.
    secret_file = tmp_path / "secret_key"
    assert secret_file.stat().st_mode & 0o077 == 0
    assert len(secret_file.read_text()) >= 32


def test_the_embedded_worker_runs_tasks_enqueued_by_another_process(tmp_path):
    env = clean_env(tmp_path)
    assert manage("migrate", "--noinput", env=env).returncode == 0
    enqueue = (
        "from datetime import timedelta; from django.utils import timezone;"
        "from rest_framework_simplejwt.token_blacklist.models import OutstandingToken;"
        "from apps.accounts.models import User; from apps.accounts.tasks import flush_expired_session_tokens;"
        "user = User.objects.create_user('worker@example.com', 'a-long-password');"
        "OutstandingToken.objects.create(user=user, jti='expired', token='t',"
        " expires_at=timezone.now() - timedelta(days=1));"
        "flush_expired_session_tokens.delay()"
    )
    result = manage("shell", "-c", enqueue, env=env)
    assert result.returncode == 0, result.stderr
    database = tmp_path / "gateway.sqlite3"
    assert outstanding_tokens(database) == 1  # enqueued, not run inline

    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "gateway_project",
            "worker",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while outstanding_tokens(database) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert outstanding_tokens(database) == 0
    finally:
        worker.terminate()
        worker.wait(timeout=20)


def outstanding_tokens(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT count(*) FROM token_blacklist_outstandingtoken").fetchone()[0]


def test_prepare_migrates_makes_the_first_admin_and_collects_static_files_only_when_they_changed(tmp_path):
    """`make run`'s one preparing process: a second start collects nothing (seconds saved); a set of
    static files that differs from the one collected is collected again."""
    env = clean_env(tmp_path)
    first = manage("prepare", env=env)
    assert first.returncode == 0, first.stderr
    assert "Generated password for admin@example.com" in first.stdout
    manifest = tmp_path / "staticfiles" / "staticfiles.json"
    stamp = tmp_path / "staticfiles.stamp"
    assert manifest.exists() and stamp.exists()
    collected_at = manifest.stat().st_mtime_ns

    second = manage("prepare", env=env)
    assert second.returncode == 0, second.stderr
    assert "Generated password" not in second.stdout
    assert manifest.stat().st_mtime_ns == collected_at  # not collected again

    stamp.write_text("what a different set of files would hash to")
    assert manage("prepare", env=env).returncode == 0
    assert manifest.stat().st_mtime_ns != collected_at
    assert stamp.read_text() != "what a different set of files would hash to"


@pytest.mark.django_db(transaction=True)
def test_nodes_preparing_at_once_on_one_postgresql_make_one_first_owner_and_all_start(tmp_path):
    """Nodes started together (a rollout, compose's replicas, the image's migrate beside `make run`)
    prepare one at a time: without the lock both found no organization, both created the first owner,
    and one node stopped on the unique address."""
    if connection.vendor != "postgresql":
        pytest.skip("the lock is PostgreSQL's; the embedded SQLite file is one node's")
    preparing = [
        subprocess.Popen(
            [sys.executable, "manage.py", "prepare", "--no-static"],
            cwd=ROOT,
            env=subprocess_env(tmp_path / f"node-{n}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    outputs = [process.communicate(timeout=120) for process in preparing]
    assert [process.returncode for process in preparing] == [0, 0, 0], outputs
    assert sum("Created organization" in stdout for stdout, _ in outputs) == 1
    assert Organization.objects.count() == 1
    assert User.objects.filter(email="admin@example.com").count() == 1
    assert not any((tmp_path / f"node-{n}" / "staticfiles").exists() for n in range(3))


def test_a_first_run_prints_one_banner_a_newcomer_can_sign_in_with_and_stops_cleanly(tmp_path):
    """`make run` on nothing (SQLite, no settings, no DJANGO_SETTINGS_MODULE): one banner once the server
    answers, with the console's address and the generated password, and none of the noise that pushed
    it off the screen (migrations, Celery's banner and its warnings); the address leads to the console,
    the password signs in, and SIGTERM stops it all with status 0 and no error."""
    env = clean_env(tmp_path, GATEWAY_BIN_DIR=str(Path(sys.executable).parent))
    del env["DJANGO_SETTINGS_MODULE"]
    port = free_port()
    env.update(HOST="127.0.0.1", PORT=str(port))
    log_path = tmp_path / "run.log"
    with open(log_path, "w+b") as log:
        run = subprocess.Popen(
            ["scripts/run.sh"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            assert until(lambda: b"Ctrl-C stops it." in log_path.read_bytes(), timeout=90), (
                log_path.read_text()
            )
            output = log_path.read_text()
            password = re.search(r"Generated password for admin@example.com: (\S+)", output).group(1)

            assert f"The gateway is ready: http://127.0.0.1:{port}/console/" in output
            opened = httpx.get(f"http://127.0.0.1:{port}/")
            assert opened.status_code == 302 and opened.headers["location"] == "/console/"
            signed_in = httpx.post(
                f"http://127.0.0.1:{port}/api/v1/auth/login",
                json={"email": "admin@example.com", "password": password},
            )
            assert signed_in.status_code == 200, signed_in.text

            run.send_signal(signal.SIGTERM)
            assert run.wait(60) == 0
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(10)
    output = log_path.read_text()
    assert output.count("The gateway is ready") == 1
    assert output.index("Generated password") > output.index("The gateway is ready")  # in the banner
    for noise in (
        "Applying ",
        "[queues]",
        "SecurityWarning",
        "No hostname was supplied",
        "Traceback",
        "Unclosed",
    ):
        assert noise not in output, f"{noise!r} in the first run's output:\n{output}"
