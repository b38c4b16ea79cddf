from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "apps.outbox"
    label = "outbox"
