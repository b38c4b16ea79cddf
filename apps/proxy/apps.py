from django.apps import AppConfig


class ProxyConfig(AppConfig):
    name = "apps.proxy"
    label = "proxy"

    def ready(self) -> None:
        from .runtime import runtime

        runtime.start()  # the proxy's process state (runtime.py), before any stage registers in it
        from apps.keys.revocation import on_revoke

        from . import stages  # noqa: F401  (registers the gateway's stages with the pipeline)
        from .auth import forget_revoked

        on_revoke(forget_revoked)  # keys revoked in this process leave its key cache at once
