from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"

    def ready(self) -> None:
        """Starts the deliveries of every event the ingest writes (apps/events' ``on_written``), and
        registers the webhooks' encrypted signing secrets (the current one and, during a roll, the
        previous one) with apps/core/stored_secrets.py, for ``manage.py reencrypt_secrets``, which
        lives in core and cannot import webhooks."""
        from apps.core import stored_secrets
        from apps.core.lazy import imported
        from apps.events.services import on_written

        from .models import Webhook

        # The deliveries of every event the ingest writes (the services, with httpx, load there).
        on_written(imported("apps.webhooks.services.deliveries_start"))
        stored_secrets.register(
            Webhook.objects.all(), ("secret_encrypted", "previous_secret_encrypted"), label="webhook"
        )
