import pytest

from tests import upstreams
from tests.proxy.conftest import add_alias, add_provider_key
from tests.servers import daphne_server

# The loopback provider stand-in (tests/upstreams.py) the live servers here proxy to.
upstream = upstreams.upstream


@pytest.fixture
def routed(organization, upstream):
    """The organization, with a provider key to the stand-in and the alias "fast"."""
    add_provider_key(organization, upstream, secret="sk-upstream-observability")
    add_alias(organization, "fast", ("openai", "gpt-4o-mini"))
    return organization


@pytest.fixture
def gateway(tmp_path, routed):
    """A live server routed to the stand-in."""
    with daphne_server(tmp_path) as base_url:
        yield base_url
