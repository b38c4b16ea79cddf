"""The one place settings are read from the environment.

Everything the gateway can be told comes through ``env``; a bad value fails loudly at start-up
(``ImproperlyConfigured``) instead of surfacing as odd behaviour later.
"""

import secrets
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# Local state of the embedded default (generated secret, SQLite file, Celery's file broker).
DATA_DIR = Path(env.str("GATEWAY_DATA_DIR", default=str(BASE_DIR / ".gateway"))).resolve()


def local_secret(name: str, *, nbytes: int = 48) -> str:
    """A random secret kept in an untracked file, so the embedded default needs no configuration
    and keeps its sessions (and encrypted data) across restarts."""
    path = DATA_DIR / name
    if path.exists():
        return path.read_text().strip()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(nbytes)
    path.touch(mode=0o600)
    path.write_text(value)
    return value


def env_choice(name: str, *, choices: tuple[str, ...], default: str) -> str:
    value = env.str(name, default=default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}")
    return value
