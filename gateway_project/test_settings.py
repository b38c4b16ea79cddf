"""Test overrides only; everything else is the real settings module.

The suite runs on SQLite + local memory by default, and on PostgreSQL + Redis when DATABASE_URL /
REDIS_URL are set (as .ci/run does).
"""

import os
import uuid
from pathlib import Path

os.environ.setdefault("SECRET_KEY", "test-secret-key-that-is-long-enough-for-hs256-signing")
# A per-run prefix keeps this run's Redis keys apart from a developer's gateway (and other runs).
os.environ.setdefault("GATEWAY_REDIS_PREFIX", f"gwtest-{uuid.uuid4().hex[:8]}")
# Under pytest-xdist every worker inherits the controller's environment, prefix included: each worker
# gets its own, or one worker's clean-up would wipe the keys (login counters, budgets) of the other.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and not os.environ["GATEWAY_REDIS_PREFIX"].endswith(f"-{_worker}"):
    os.environ["GATEWAY_REDIS_PREFIX"] += f"-{_worker}"

from .settings import *  # noqa: F403, E402
from .settings import DATA_DIR, DATABASES  # noqa: E402

# Fast hashing for the suite; PBKDF2 stays available for users a live server (real settings) checks.
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so a Daphne subprocess started by a test sees the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}

# The suite collects no static files (tests/management/test_api_docs.py collects its own): an empty
# folder of its own keeps WhiteNoise from warning in every test client. Made here: the real settings
# make no folder when imported.
STATIC_ROOT = str(DATA_DIR / "staticfiles-test")
Path(STATIC_ROOT).mkdir(parents=True, exist_ok=True)

# The tests' upstreams are real servers on loopback.
GATEWAY_ALLOW_PRIVATE_UPSTREAMS = True
GATEWAY_ALLOW_PRIVATE_WEBHOOKS = True  # the receivers of the tests listen on loopback
GATEWAY_ALLOW_PRIVATE_SSO = True  # the tests' identity provider (tests/oidc_provider.py) too

# Each run spools to its own directory, never the developer's.
GATEWAY_OUTBOX_DIR = str(DATA_DIR / f"outbox-test-{os.getpid()}")
GATEWAY_OUTBOX_FSYNC_SECONDS = 0.02

# A single candidate's retry after a transient failure waits this long, not the production half second.
GATEWAY_RETRY_BACKOFF_SECONDS = 0.01

# And keeps its metrics apart too (apps/observability/metrics.py).
GATEWAY_METRICS_DIR = str(DATA_DIR / f"metrics-test-{os.getpid()}")
