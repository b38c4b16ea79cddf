# The proxy's fixtures: audit entries come from requests through the proxy.
from tests.proxy.conftest import (  # noqa: F401
    _fresh_routing_state,
    gateway_key,
    make_upstream,
    proxy,
    records,
    routed,
    sdk,
    upstream,
)
