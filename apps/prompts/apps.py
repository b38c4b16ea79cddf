from django.apps import AppConfig


class PromptsConfig(AppConfig):
    name = "apps.prompts"
    label = "prompts"
