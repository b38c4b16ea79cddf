from django.apps import AppConfig


class LimitsConfig(AppConfig):
    name = "apps.limits"
    label = "limits"
