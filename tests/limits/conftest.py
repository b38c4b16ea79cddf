# The proxy's fixtures: limits are enforced on requests through the proxy.
from tests.proxy.conftest import (  # noqa: F401
    _fresh_routing_state,
    make_upstream,
    proxy,
    upstream,
)
