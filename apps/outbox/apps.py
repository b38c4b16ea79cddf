from django.apps import AppConfig


class OutboxConfig(AppConfig):
    """The ingest thread of a Celery worker (worker.py) is wired by gateway_project/celery.py, which
    only a worker loads: a server process does not import Celery."""

    name = "apps.outbox"
    label = "outbox"
