"""This test process's own metrics, as /metrics would show them (its metrics folder is its own:
gateway_project/test_settings.py)."""

from django.conf import settings
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector


def metric_value(name: str, **labels: str) -> float:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=settings.GATEWAY_METRICS_DIR)
    return registry.get_sample_value(name, labels) or 0.0
