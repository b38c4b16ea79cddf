import atexit
import os

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "apps.observability"
    label = "observability"

    def ready(self) -> None:
        from .metrics import forget_dead_processes, forget_process

        forget_dead_processes()
        atexit.register(forget_process, os.getpid())
