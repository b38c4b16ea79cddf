import logging

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from django.conf import settings

        from . import checks  # noqa: F401  (registers the deployment checks)
        from .local_state import make_local_folders

        make_local_folders()
        if settings.GATEWAY_LOG_FORMAT == "json":
            # Python's warnings (a library's, at start-up) are log lines too, not free text on stderr.
            logging.captureWarnings(True)
