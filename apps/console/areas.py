"""The console's areas, in the order the navigation shows them.

Each area is a module of ``apps/console/views/`` that declares its ``urlpatterns`` and its ``NAVIGATION``
entry (label, the URL name its link opens, and the prefix of the URL names that mark it current).
"""

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Navigation:
    label: str
    url_name: str  # in the "console" namespace
    current_prefix: str  # a page whose URL name starts with this marks the link current


AREAS = (
    "dashboard",
    "keys",
    "providers",
    "catalog",
    "teams",
    "policies",
    "prompts",
    "experiments",
    "logs",
    "tail",
    "webhooks",
    "organization",
    "sso",
)


def area_modules() -> list:
    return [import_module(f"apps.console.views.{area}") for area in AREAS]
