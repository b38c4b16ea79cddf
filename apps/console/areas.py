"""The console's areas and its navigation.

Each area is a module of ``apps/console/views/`` that declares its ``urlpatterns``. The navigation
groups the areas' pages by the task people come for (what traffic did, who may call, where requests
go, what is allowed, what is being built, how the organization is set up), in one place so the side
bar reads as a whole.
"""

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Navigation:
    label: str
    url_name: str  # in the "console" namespace
    current_prefix: str  # a page whose URL name starts with this marks the link current


@dataclass(frozen=True)
class Section:
    label: str
    links: tuple[Navigation, ...]


AREAS = (
    "dashboard",
    "logs",
    "tail",
    "keys",
    "teams",
    "sso",
    "providers",
    "catalog",
    "policies",
    "budgets",
    "prompts",
    "experiments",
    "playground",
    "organization",
    "webhooks",
)

SECTIONS = (
    Section(
        "Traffic",
        (
            Navigation("Dashboard", "console:dashboard", "dashboard"),
            # "logs", not "log": the sign-in pages' names (login, logout) must not mark it current.
            Navigation("Logs", "console:logs", "logs"),
            Navigation("Live tail", "console:tail", "tail"),
        ),
    ),
    Section(
        "Access",
        (
            Navigation("API keys", "console:api-keys", "api-key"),
            Navigation("Teams", "console:teams", "team"),
            Navigation("Members", "console:organization-members", "organization-member"),
            Navigation("SSO", "console:sso-connections", "sso-connection"),
        ),
    ),
    Section(
        "Routing",
        (
            Navigation("Providers", "console:provider-keys", "provider-key"),
            Navigation("Models", "console:models", "model"),
        ),
    ),
    Section(
        "Governance",
        (
            Navigation("Policies", "console:policies", "polic"),
            Navigation("Budgets", "console:budgets", "budget"),
        ),
    ),
    Section(
        "Build",
        (
            Navigation("Prompts", "console:prompts", "prompt"),
            Navigation("Experiments", "console:experiments", "experiment"),
            Navigation("Playground", "console:playground", "playground"),
        ),
    ),
    Section(
        "Settings",
        (
            Navigation("Organization", "console:organization-settings", "organization-settings"),
            Navigation("Webhooks", "console:webhooks", "webhook"),
            Navigation("Account", "console:account", "account"),
        ),
    ),
)
HOME = SECTIONS[0].links[0].url_name


def area_modules() -> list:
    return [import_module(f"apps.console.views.{area}") for area in AREAS]
