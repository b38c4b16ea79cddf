from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "apps.proxy"
    label = "proxy"

    def ready(self) -> None:
        from . import stages  # noqa: F401  (registers the gateway's stages with the pipeline)
