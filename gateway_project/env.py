"""The one place settings are read from the environment.

Everything the gateway can be told comes through ``env``; a bad value fails loudly at start-up
(``ImproperlyConfigured``) instead of surfacing as odd behaviour later. Every variable can also be
given as a file: ``NAME_FILE=/run/secrets/name`` (a Docker or Kubernetes secret) is read in place of
``NAME``, and wins over it.
"""

import secrets
from pathlib import Path
from typing import TypeVar

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


class _SecretFiles(environ.FileAwareMapping):
    """``os.environ`` with ``NAME_FILE``: the file's content without its final line break (which
    ``echo`` and most editors add), and an unreadable file named in the error."""

    def __getitem__(self, key: str) -> str:
        try:
            value = super().__getitem__(key)
        except OSError as error:
            raise ImproperlyConfigured(
                f"{key}_FILE names {self.env.get(key + '_FILE')!r}, which cannot be read ({error.strerror})"
            ) from None
        return value.rstrip("\r\n") if self.env.get(key + "_FILE") else value


class _Env(environ.FileAwareEnv):
    ENVIRON = _SecretFiles()


env = _Env()

# Local state of the embedded default (generated secret, SQLite file, Celery's file broker).
DATA_DIR = Path(env.str("GATEWAY_DATA_DIR", default=str(BASE_DIR / ".gateway"))).resolve()


def local_secret(name: str, *, nbytes: int = 48) -> str:
    """A random secret kept in an untracked file, so the embedded default needs no configuration
    and keeps its sessions (and encrypted data) across restarts. The one thing importing the
    settings may write, and only when no secret is configured: the value is needed right here."""
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


Number = TypeVar("Number", int, float)


def env_number(name: str, *, default: Number, minimum: Number, maximum: Number) -> Number:
    """A numeric setting within ``[minimum, maximum]``: an integer, or a float when ``default`` is
    one. Anything else (text, an out-of-range number, NaN) stops the start-up with the setting's
    name and its range."""
    kind = type(default)
    raw = env.str(name, default=str(default)).strip()
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not minimum <= value <= maximum:  # NaN compares false: refused too
        integer = " (an integer)" if kind is int else ""
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}{integer}; got {raw!r}")
    return value
