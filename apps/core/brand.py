"""Every gateway header name, in one place: each carries the brand word (the ``GATEWAY_BRAND``
setting, default ``gateway``), so they are built once and again only when that setting changes."""

from dataclasses import dataclass

from django.conf import settings
from django.core.signals import setting_changed


def header(name: str) -> str:
    """``header("request-id")`` -> ``x-gateway-request-id``."""
    return f"x-{settings.GATEWAY_BRAND}-{name}"


@dataclass(frozen=True, slots=True)
class HeaderNames:
    # Sent on answers.
    request_id: str
    latency: str
    overhead: str
    ttft: str
    cache: str
    cost: str
    provider: str
    model: str
    policy_action: str
    policy_reason: str
    experiment: str
    variant: str
    error_code: str  # an error's code (the Messages API's error shape has no room for it)
    # RFC 9211 ``Cache-Status`` values, by the x-gateway-cache verdict; the cache is named by the brand.
    cache_status: dict[str, str]
    # Read from requests.
    team: str
    data_region: str
    experiment_unit: str

    @classmethod
    def build(cls) -> "HeaderNames":
        return cls(
            request_id=header("request-id"),
            latency=header("latency-ms"),
            overhead=header("overhead-ms"),
            ttft=header("ttft-ms"),
            cache=header("cache"),
            cost=header("cost-usd"),
            provider=header("provider"),
            model=header("model"),
            policy_action=header("policy-action"),
            policy_reason=header("policy-reason"),
            experiment=header("experiment"),
            variant=header("variant"),
            error_code=header("error-code"),
            cache_status={
                **{tier: f"{settings.GATEWAY_BRAND}; hit; detail={tier}" for tier in ("l1", "l2", "l3")},
                "miss": f"{settings.GATEWAY_BRAND}; fwd=uri-miss",
                "bypass": f"{settings.GATEWAY_BRAND}; fwd=bypass",
            },
            team=header("team"),
            data_region=header("data-region"),
            experiment_unit=header("experiment-unit"),
        )


_names: HeaderNames | None = None


def header_names() -> HeaderNames:
    global _names
    if _names is None:
        _names = HeaderNames.build()
    return _names


def _forget_names(*, setting: str, **kwargs) -> None:
    global _names
    if setting == "GATEWAY_BRAND":
        _names = None


setting_changed.connect(_forget_names)
