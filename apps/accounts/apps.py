from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"

    def ready(self) -> None:
        from . import login_throttle, schema  # noqa: F401  (connects the signal; registers the OpenAPI extension)
