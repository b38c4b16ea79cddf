from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "apps.experiments"
    label = "experiments"
