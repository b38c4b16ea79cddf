from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the deployment checks)
        from .local_state import make_local_folders

        make_local_folders()
