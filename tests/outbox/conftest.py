"""The outbox's tests: a kind of their own, registered as a domain app registers its kind."""

import pytest

from apps.outbox.outbox import register, unregister

KIND = "test-row"


class Database:
    """Stands for the database behind a handler: up or down, and what it holds."""

    def __init__(self) -> None:
        self.up = True
        self.rows: dict[str, dict] = {}
        self.calls = 0
        self.written: list[str] = []  # every id handed over, duplicates included

    def write(self, payloads: list[dict]) -> None:
        self.calls += 1
        if not self.up:
            raise ConnectionError("database unavailable")
        if any(payload.get("poison") for payload in payloads):
            raise ValueError("this row violates a constraint")
        for payload in payloads:
            self.written.append(payload["id"])
            self.rows.setdefault(payload["id"], payload)  # idempotent, like ON CONFLICT DO NOTHING


@pytest.fixture
def database():
    """A test kind, registered as a domain app registers its own (one call), with its handler."""
    database = Database()
    register(KIND, database.write)
    yield database
    unregister(KIND)
