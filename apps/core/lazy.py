"""``imported("apps.teams.services.team_memberships_end")``: a function registered by its dotted path
and imported on its first call. An app's ``AppConfig.ready`` runs in every process; registering what
it imports there would load that module (and what it imports: DRF, httpx, allauth's views) into
every server at start-up, though a server that only proxies never calls it (docs/benchmarks.md,
"Issue 23")."""

from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string


class imported:
    __slots__ = ("_function", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._function: Callable[..., Any] | None = None

    def resolve(self) -> Callable[..., Any]:
        if self._function is None:
            self._function = import_string(self.path)
        return self._function

    def __call__(self, *args, **kwargs) -> Any:
        return self.resolve()(*args, **kwargs)

    # The registries keep one of each (ready() may run more than once in a test process).
    def __eq__(self, other: object) -> bool:
        return isinstance(other, imported) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"imported({self.path!r})"
