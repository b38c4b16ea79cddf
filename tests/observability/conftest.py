from tests import upstreams

# The loopback provider stand-in (tests/upstreams.py) the live servers here proxy to.
upstream = upstreams.upstream
