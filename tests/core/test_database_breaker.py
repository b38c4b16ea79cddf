"""The database breaker (apps/core/database.py, apps/core/postgresql/) tells a full pool from a
database that is away: a request that waits out the pool's timeout while every connection is in use
must not make the whole process fail fast with 503s (found in review)."""

import threading

import pytest
from django.db import OperationalError, connection, connections

from apps.core.database import outage

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the pool is PostgreSQL's"),
]


@pytest.fixture
def pool_of_one():
    db = connection.settings_dict
    saved = db["OPTIONS"].get("pool")
    connection.close()
    connection.close_pool()
    db["OPTIONS"]["pool"] = {"min_size": 0, "max_size": 1, "timeout": 0.3}
    try:
        yield
    finally:
        connection.close_pool()
        db["OPTIONS"]["pool"] = saved
        connection.close_pool()


def in_a_thread(work) -> dict:
    outcome = {}

    def run():
        try:
            outcome["value"] = work()
        except Exception as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome


def test_a_full_pool_is_not_taken_for_a_database_that_is_away(pool_of_one):
    held = threading.Event()
    release = threading.Event()

    def hold_the_only_connection():
        connections["default"].ensure_connection()
        held.set()
        release.wait(30)
        connections["default"].close()

    holder = threading.Thread(target=hold_the_only_connection)
    holder.start()
    try:
        assert held.wait(30)
        outcome = in_a_thread(lambda: connections["default"].ensure_connection())

        assert isinstance(outcome.get("error"), OperationalError)  # the pool's timeout
        assert not outage.known()  # the database answered a connection of its own
    finally:
        release.set()
        holder.join(30)
    assert "error" not in in_a_thread(lambda: connections["default"].ensure_connection())
