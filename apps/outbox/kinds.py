"""The kinds of item the outbox carries, each registered once by the app it belongs to.

A kind is a name, a handler that writes a batch of payloads (in the ingest, idempotently: a batch
may be written twice after a crash or a replay), and optionally the function that turns what a
producer puts into its plain, versioned payload (on the producer, so it must be cheap). Register in
the app's ``AppConfig.ready``: every process (servers, the ingest, workers, tests) runs it, so a
kind works in every process layout::

    outbox.register("webhook", webhook_events_write, payload=event_payload)
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[list[Any]], None]
Payload = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Kind:
    handler: Handler
    payload: Payload | None = None


kinds: dict[str, Kind] = {}


def register(kind: str, handler: Handler, *, payload: Payload | None = None) -> None:
    kinds[kind] = Kind(handler=handler, payload=payload)


def unregister(kind: str) -> None:
    kinds.pop(kind, None)
