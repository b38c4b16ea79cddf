"""Every periodic task takes a database outage as expected: Celery logs it in one line without a
traceback (the task's ``throws``), and beat runs it again on schedule (the outside fault run of issue
20 saw a traceback a minute from the feedback sweep while PostgreSQL was cut)."""

import importlib

from django.conf import settings

from apps.core.database import DatabaseUnreachable


def test_every_scheduled_task_expects_a_database_outage():
    names = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    assert names
    for name in names:
        module, _, function = name.rpartition(".")
        task = getattr(importlib.import_module(module), function)
        assert DatabaseUnreachable in task.throws, f"{name} logs a database outage as an error"
