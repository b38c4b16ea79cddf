from django.apps import AppConfig


class KeysConfig(AppConfig):
    name = "apps.keys"
    label = "keys"
