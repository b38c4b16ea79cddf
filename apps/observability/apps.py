import atexit
import os

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "apps.observability"
    label = "observability"

    def ready(self) -> None:
        from . import tracing
        from .metrics import forget_dead_processes, forget_process

        forget_dead_processes()
        atexit.register(forget_process, os.getpid())
        # Traces only with the OTEL_* variables; the management API's and the tasks' through the
        # standard instrumentations (the proxy's own spans: apps/proxy).
        tracing.setup(instrument_django=True, instrument_celery=True)
