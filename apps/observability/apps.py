import atexit
import os

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "apps.observability"
    label = "observability"

    def ready(self) -> None:
        from apps.core.preparation import register as prepare_with

        from . import tracing
        from .metrics import clear_stopped_processes, forget_dead_processes, forget_process

        # `manage.py prepare`: prometheus-client's multiprocess mode adds up every file in the
        # folder, of processes long gone too, so a node's run starts without the last run's.
        prepare_with(clear_stopped_processes)
        forget_dead_processes()
        atexit.register(forget_process, os.getpid())
        # Traces only with the OTEL_* variables; the management API's and the tasks' through the
        # standard instrumentations (the proxy's own spans: apps/proxy).
        tracing.setup(instrument_django=True, instrument_celery=True)
