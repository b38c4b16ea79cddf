"""The contract suites: every test runs against each implementation of a backend, the embedded one
and the one in Redis (skipped only when no REDIS_URL is configured), so a difference between them
fails here rather than surprising someone who moves to Redis."""

import inspect

import pytest
from django.conf import settings

IMPLEMENTATIONS = [
    "embedded",
    pytest.param("redis", marks=pytest.mark.skipif(not settings.REDIS_URL, reason="no REDIS_URL")),
]


def protocol_methods(protocol: type) -> list[str]:
    return sorted(
        name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")
    )


def assert_conforms(implementation: type, protocol: type) -> None:
    """The protocol's methods, each with the same parameters, defaults, annotations and return type,
    and async where the protocol's is."""
    methods = protocol_methods(protocol)
    assert methods, f"{protocol.__name__} declares no method"
    for name in methods:
        expected, actual = getattr(protocol, name), getattr(implementation, name)
        assert inspect.signature(actual) == inspect.signature(expected), f"{implementation.__name__}.{name}"
        assert inspect.iscoroutinefunction(actual) == inspect.iscoroutinefunction(expected), name
