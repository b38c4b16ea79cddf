import pytest

from apps.limits.counters import local_counters

# The proxy's fixtures: limits are enforced on requests through the proxy.
from tests.proxy.conftest import (  # noqa: F401
    _fresh_routing_state,
    make_upstream,
    proxy,
    upstream,
)


@pytest.fixture(autouse=True)
def _fresh_counters():
    """The in-process counters (budgets and rate limits without Redis) start empty in every test."""
    local_counters.clear()
    yield
    local_counters.clear()
