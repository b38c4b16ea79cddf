from django.apps import AppConfig


class CacheConfig(AppConfig):
    name = "apps.cache"
    label = "cache"
