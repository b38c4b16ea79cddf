"""How the settings read the environment, each in a fresh process as a deployment starts one:
``NAME_FILE`` secrets, numeric ranges checked at start-up, and no directory made by an import."""

import subprocess
import sys

import pytest

from tests.test_deployment import ROOT, clean_env, manage

SECRET = "a-secret-key-from-a-docker-secret-file-0123456789"
PRINT_SECRET_KEY = "import django; from django.conf import settings; print(settings.SECRET_KEY)"


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_secret_can_come_from_a_file_named_by_name_file(tmp_path):
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(SECRET + "\n")  # as `echo ... > file` writes it

    result = python(PRINT_SECRET_KEY, clean_env(tmp_path / "data", SECRET_KEY_FILE=str(secret_file)))

    assert result.returncode == 0, result.stderr
    assert result.stdout == SECRET + "\n"


def test_the_file_wins_over_the_variable(tmp_path):
    secret_file = tmp_path / "secret_key"
    secret_file.write_text(SECRET)
    env = clean_env(tmp_path / "data", SECRET_KEY="x" * 40, SECRET_KEY_FILE=str(secret_file))

    result = python(PRINT_SECRET_KEY, env)

    assert result.stdout.strip() == SECRET


def test_an_unreadable_secret_file_fails_at_start_up_naming_the_variable(tmp_path):
    env = clean_env(tmp_path / "data", SECRET_KEY_FILE=str(tmp_path / "missing"))

    result = python(PRINT_SECRET_KEY, env)

    assert result.returncode != 0
    assert f"SECRET_KEY_FILE names '{tmp_path / 'missing'}', which cannot be read" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("GATEWAY_MAX_ATTEMPTS", "0", "GATEWAY_MAX_ATTEMPTS must be between 1 and 10 (an integer); got '0'"),
        ("GATEWAY_MAX_BODY_BYTES", "-1", "GATEWAY_MAX_BODY_BYTES must be between 1024 and"),
        ("SESSION_ACCESS_MINUTES", "fifteen", "SESSION_ACCESS_MINUTES must be between 1 and 1440"),
        ("GATEWAY_REQUEST_DEADLINE_SECONDS", "nan", "GATEWAY_REQUEST_DEADLINE_SECONDS must be between"),
        ("GATEWAY_STREAM_IDLE_SECONDS", "inf", "GATEWAY_STREAM_IDLE_SECONDS must be between 1 and 3600"),
        ("GATEWAY_LOGIN_FAILURE_LIMIT", "2.5", "GATEWAY_LOGIN_FAILURE_LIMIT must be between 1 and 1000"),
        ("SECURE_HSTS_SECONDS", "99999999999", "SECURE_HSTS_SECONDS must be between 0 and 63072000"),
        ("GATEWAY_AUDIT_RETENTION_BATCH_SIZE", "0", "GATEWAY_AUDIT_RETENTION_BATCH_SIZE must be between 1"),
    ],
)
def test_a_numeric_setting_out_of_its_range_fails_at_start_up_with_its_name_and_range(
    tmp_path, name, value, expected
):
    result = manage("check", env=clean_env(tmp_path, SECRET_KEY="k" * 40, **{name: value}))

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert expected in result.stderr


def test_a_numeric_setting_may_come_from_a_file_too(tmp_path):
    limit = tmp_path / "limit"
    limit.write_text("0\n")

    result = manage(
        "check", env=clean_env(tmp_path / "data", SECRET_KEY="k" * 40, GATEWAY_MAX_ATTEMPTS_FILE=str(limit))
    )

    assert "GATEWAY_MAX_ATTEMPTS must be between 1 and 10" in result.stderr


def test_importing_the_settings_creates_no_directory(tmp_path):
    data_dir = tmp_path / "data"
    env = clean_env(data_dir, SECRET_KEY="k" * 40)

    result = python("from django.conf import settings; print(settings.STATIC_ROOT, settings.DATABASES)", env)

    assert result.returncode == 0, result.stderr
    assert not data_dir.exists()


def test_the_embedded_default_makes_its_directories_when_a_process_starts(tmp_path):
    data_dir = tmp_path / "data"

    result = manage("check", env=clean_env(data_dir, SECRET_KEY="k" * 40))

    assert result.returncode == 0, result.stderr
    # The SQLite file's folder and Celery's file broker (apps/core/local_state.py).
    for folder in ("", "broker/queue", "broker/processed", "broker/control"):
        assert (data_dir / folder).is_dir(), folder
