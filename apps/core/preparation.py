"""What ``manage.py prepare`` (``make run``, before the node's processes start) does besides the
migrations, the first admin and the static files: the steps other apps register here, since the core
imports none of them (docs/architecture.md, "Registries")."""

from collections.abc import Callable

_steps: list[Callable[[], None]] = []


def register(step: Callable[[], None]) -> Callable[[], None]:
    if step not in _steps:
        _steps.append(step)
    return step


def run_steps() -> None:
    for step in _steps:
        step()
