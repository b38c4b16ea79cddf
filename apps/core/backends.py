"""Choosing, once, between a mechanism's two implementations: in this process (the embedded default,
one server process) and in Redis (every process and node shares it).

Each mechanism (the limits counters, key revocation, configuration generations, the cache's shared
tier) has one ``typing.Protocol`` and two classes that conform to it, and one function that returns
the implementation for this deployment: ``backend(embedded, with_redis)`` picks by ``REDIS_URL``
the first time it is called and keeps that answer, so callers call the protocol and never ask which
one runs. docs/architecture.md, "Backends: one interface each".

``REDIS_URL`` does not change in a running deployment; a test that overrides it
(``override_settings``, pytest-django's ``settings``) gets the choice made again, through Django's
``setting_changed`` signal.
"""

from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.core.signals import setting_changed

T = TypeVar("T")

_choices: list[Callable[[], object]] = []


def backend(embedded: Callable[[], T], with_redis: Callable[[], T]) -> Callable[[], T]:
    """A function that returns ``with_redis()`` when ``REDIS_URL`` is set, else ``embedded()``,
    decided on its first call (the factories usually return a module's one instance)."""
    chosen: list[T] = []

    def choose() -> T:
        if not chosen:
            chosen.append(with_redis() if settings.REDIS_URL else embedded())
        return chosen[0]

    choose.forget = chosen.clear  # type: ignore[attr-defined]
    _choices.append(choose)
    return choose


def _forget_choices(*, setting: str, **_: object) -> None:
    if setting == "REDIS_URL":
        for choose in _choices:
            choose.forget()  # type: ignore[attr-defined]


setting_changed.connect(_forget_choices)
