"""A secret scan over everything the suite leaves behind.

Every API key and provider key made during the run goes into a ledger; the scan then looks for them
where a leak would stay: each test's audit rows (read before the test's database is rolled back or
flushed), the server logs (the records this process logged and every Daphne log a test wrote), the
outbox spools and dead-letter files (decrypted: encryption at rest is not what keeps a secret out
of them), and every file a test exported or wrote under pytest's temporary directory: among them
the JSON logs of the live servers (tests/observability/test_logs.py) and the spans an OTLP receiver
got from them, as received (tests/observability/test_traces.py). A secret
found anywhere fails the run, named by its fingerprint, never by its value.

The ledger observes the two places a secret exists in clear: ``generate_api_key`` (the only maker
of API keys, through ``apps.keys.services``) and a provider key's save (its secret is decrypted
there). Neither is changed: the wrapper returns what the real function returned.
"""

import functools
import hashlib
import logging
import re
from pathlib import Path

import ahocorasick
import pytest
from django.conf import settings

# Test fixtures name some provider keys "first" or "heavy"; a word that short is no secret and would
# match ordinary text. Real keys are far longer.
MIN_SECRET_LENGTH = 12
# The product's own source: a string written in it is no secret. Hypothesis draws the code's
# constants as examples, so a fuzzed provider key may be named "organization_id", a word every
# audit record carries; no real key is part of the gateway's code.
PRODUCT_SOURCES = ("apps", "gateway_project")
MAX_FILE_BYTES = 64 * 2**20
# Fernet tokens (secrets at rest, older spool lines) and sealed spool lines (apps/core/crypto.py).
SEALED_TOKEN = re.compile(rb"gAAAAA[A-Za-z0-9_\-=]+|g1\.[A-Za-z0-9+/=]+")


class Ledger:
    """The secrets made so far, and a matcher for all of them at once.

    A regex alternation of thousands of secrets tries each one at every position (seconds a
    megabyte); an Aho-Corasick automaton reads the text once whatever the number of secrets. It is
    rebuilt only when the secrets added since the last build outnumber RECENT_LIMIT: the few added
    since are looked for one by one.
    """

    RECENT_LIMIT = 200

    def __init__(self) -> None:
        self.secrets: set[str] = set()
        self._automaton: ahocorasick.Automaton | None = None
        self._recent: list[str] = []
        self.findings: list[str] = []

    def add(self, secret: str) -> None:
        if len(secret) < MIN_SECRET_LENGTH or secret in self.secrets or secret in _product_source():
            return
        self.secrets.add(secret)
        self._recent.append(secret)

    def _matcher(self) -> tuple["ahocorasick.Automaton | None", list[str]]:
        if len(self._recent) > self.RECENT_LIMIT:
            automaton = ahocorasick.Automaton()
            for secret in self.secrets:
                automaton.add_word(secret, secret)
            automaton.make_automaton()
            self._automaton, self._recent = automaton, []
        return self._automaton, self._recent

    def found_in(self, text: str) -> set[str]:
        automaton, recent = self._matcher()
        found = {secret for _, secret in automaton.iter(text)} if automaton is not None else set()
        return found | {secret for secret in recent if secret in text}

    def scan(self, text: str, where: str) -> None:
        if not text or not self.secrets:
            return
        for match in self.found_in(text):
            self.findings.append(f"{where}: secret {fingerprint(match)} ({match[:4]}...)")

    def scan_bytes(self, data: bytes, where: str) -> None:
        self.scan(data.decode("utf-8", errors="replace"), where)
        for token in SEALED_TOKEN.findall(data):
            plain = _decrypt(token)
            if plain is not None:
                self.scan(plain.decode("utf-8", errors="replace"), f"{where} (decrypted)")


@functools.cache
def _product_source() -> str:
    root = Path(settings.BASE_DIR)
    paths = [path for folder in PRODUCT_SOURCES for path in sorted((root / folder).rglob("*.py"))]
    return "\n".join(path.read_text(errors="replace") for path in paths)


def fingerprint(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def _decrypt(token: bytes) -> bytes | None:
    from apps.core import crypto

    try:
        return crypto.open_line(token)
    except Exception:  # not one of ours, or not a token at all
        return None


ledger = Ledger()


class _LogCapture(logging.Handler):
    """Keeps every record this process logs, formatted as the server would write it."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a record that cannot format is not ours to judge here
            self.lines.append(repr(record.msg))


def _observe_secret_makers() -> None:
    from django.db.models.signals import pre_save

    from apps.keys import services as key_services
    from apps.providers.models import ProviderKey

    make = key_services.generate_api_key

    def generate_and_record() -> str:
        secret = make()
        ledger.add(secret)
        return secret

    key_services.generate_api_key = generate_and_record

    def record_provider_secret(sender, instance: ProviderKey, **kwargs) -> None:
        if instance.secret_encrypted:
            ledger.add(instance.secret())

    pre_save.connect(record_provider_secret, sender=ProviderKey, weak=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Reads the test's audit rows while they still exist (before rollback or flush)."""
    if ledger.secrets and _uses_database(item):
        _scan_audit_rows(item)
    yield


def _uses_database(item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & {"db", "transactional_db", "django_db_setup"}) or item.get_closest_marker("django_db")


def _scan_audit_rows(item) -> None:
    from pytest_django.plugin import blocking_manager_key

    from apps.audit.models import AuditEntry

    blocker = item.config.stash[blocking_manager_key]
    with blocker.unblock():
        try:
            rows = list(AuditEntry.objects.values_list())
        except Exception:  # the test broke the connection on purpose (fault tests): nothing to read
            return
    for row in rows:
        ledger.scan(" ".join(str(value) for value in row), f"audit row left by {item.nodeid}")


@pytest.fixture(scope="session", autouse=True)
def _secret_scan(tmp_path_factory, _remove_this_runs_outbox_spool):
    """Runs the scan when the session ends, before the spool directory is removed."""
    _observe_secret_makers()
    capture = _LogCapture()
    logging.getLogger().addHandler(capture)
    yield
    logging.getLogger().removeHandler(capture)
    for number, line in enumerate(capture.lines):
        ledger.scan(line, f"this process's log, record {number}")
    for root in {Path(tmp_path_factory.getbasetemp()), Path(settings.GATEWAY_OUTBOX_DIR)}:
        for path in _files(root):
            ledger.scan_bytes(path.read_bytes(), str(path))
    assert not ledger.findings, "Secrets made during the run were found at rest:\n" + "\n".join(
        sorted(set(ledger.findings))[:50]
    )


def _files(root: Path):
    if not root.exists():
        return
    for path in root.rglob("*"):
        if path.is_file() and not path.name.endswith((".sqlite3", ".sqlite3-wal", ".sqlite3-shm")):
            if path.stat().st_size <= MAX_FILE_BYTES:
                yield path
