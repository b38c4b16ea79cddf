from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "apps.conversations"
    label = "conversations"

    def ready(self) -> None:
        from apps.core import stored_secrets
        from apps.outbox import kinds

        from . import services
        from .models import StoredResponse

        kinds.register(services.KIND, services.stored_responses_write)  # put already sealed
        stored_secrets.register(
            StoredResponse.objects.exclude(content_encrypted=""),
            ("content_encrypted",),
            label="stored response",
        )
