from django.apps import AppConfig


class ProvidersConfig(AppConfig):
    name = "apps.providers"
    label = "providers"

    def ready(self) -> None:
        """Registers the provider keys' encrypted secrets with apps/core/stored_secrets.py, for
        ``manage.py reencrypt_secrets``, which lives in core and cannot import providers."""
        from apps.core import stored_secrets

        from .models import ProviderKey

        stored_secrets.register(ProviderKey.objects.all(), ("secret_encrypted",), label="provider key")
