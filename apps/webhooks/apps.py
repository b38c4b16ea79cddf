from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"

    def ready(self) -> None:
        from apps.events.services import on_written

        from .services import deliveries_start

        on_written(deliveries_start)  # the deliveries of every event the ingest writes
