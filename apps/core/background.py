"""The gateway's Celery app, and ``task``, the decorator every app's ``tasks.py`` defines its tasks
with. Imported where a task is defined or sent (the worker, beat, a service that enqueues), never at a
server's start-up: a server process that sends no task never loads Celery (docs/benchmarks.md,
"Issue 23"). ``gateway_project/celery.py`` is what ``celery -A gateway_project`` finds; it wires the
worker's own threads around this app."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gateway_project.settings")

app = Celery("gateway")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Bound to this app (unlike ``shared_task``): sending one works in a process that has not loaded
# gateway_project.celery, with this app's broker, not Celery's default one.
task = app.task
