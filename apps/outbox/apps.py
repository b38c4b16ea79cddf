from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "apps.outbox"
    label = "outbox"

    def ready(self) -> None:
        from . import worker

        worker.connect()
