from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "apps.experiments"
    label = "experiments"

    def ready(self) -> None:
        from apps.audit.services import on_entries_written
        from apps.core.lazy import imported

        # Feedback sent before its request's entry was written is attached as the ingest writes it.
        on_entries_written(imported("apps.experiments.services.feedback_written_entries"))
