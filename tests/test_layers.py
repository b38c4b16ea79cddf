"""The layers of docs/architecture.md, enforced: the table there gives each app a level, and an app
imports only apps of lower levels (at any depth, inside functions too; migrations aside), so the app
import graph has no cycle. Read from the source with ast, so a wrong import fails here with its file
and line before it becomes a cycle."""

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "apps"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# | 3 | domains | events, limits, prompts, sso | ... |
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*[^|]+\|\s*([^|]+)\|")


def declared_levels(text: str) -> dict[str, int]:
    levels: dict[str, int] = {}
    for line in text.splitlines():
        if match := _ROW.match(line):
            for app in match.group(2).split(","):
                assert app.strip() not in levels, f"{app.strip()} has two rows in docs/architecture.md"
                levels[app.strip()] = int(match.group(1))
    return levels


LEVELS = declared_levels(ARCHITECTURE.read_text())


def installed_apps() -> set[str]:
    return {path.name for path in APPS.iterdir() if (path / "apps.py").exists()}


def modules(app: str) -> Iterator[Path]:
    for path in sorted((APPS / app).rglob("*.py")):
        if "migrations" not in path.relative_to(APPS).parts:
            yield path


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """Every module ``path`` imports, at any depth (inside functions too), as absolute names."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            yield node.lineno, base
            # ``from apps import proxy`` names the module in the imported names.
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def imported_apps(app: str) -> Iterator[tuple[str, str]]:
    """(where, imported app) for every import of another app by ``app``'s modules."""
    found = {
        (f"{path.relative_to(ROOT)}:{line}", parts[1])
        for path in modules(app)
        for line, name in imported_modules(path)
        if len(parts := name.split(".")) >= 2 and parts[0] == "apps" and parts[1] in LEVELS.keys() - {app}
    }
    yield from sorted(found)


def test_every_app_has_a_level_and_every_level_names_an_app():
    assert installed_apps() - LEVELS.keys() == set(), "add the app to the table in docs/architecture.md"
    assert LEVELS.keys() - installed_apps() == set(), "the table names an app that is not there"


def test_an_app_imports_only_apps_of_lower_levels():
    wrong = [
        f"{where} imports apps.{imported} (level {LEVELS[imported]}) from {app} (level {LEVELS[app]})"
        for app in sorted(installed_apps())
        for where, imported in imported_apps(app)
        if LEVELS[imported] >= LEVELS[app]
    ]

    assert wrong == []


def test_the_layer_check_sees_the_table_and_the_imports():
    """A guard for the guards: the table is read, and an import it should catch is caught."""
    assert LEVELS["core"] == 0
    assert LEVELS["console"] == max(LEVELS.values())
    assert len(set(LEVELS.values())) >= 4
    # The catalog's models name Organization: an edge from level 5 down to level 2.
    assert "organizations" in {imported for _, imported in imported_apps("catalog")}
    assert declared_levels("| 1 | t | a, b | x |\n| 2 | t | c | y |") == {"a": 1, "b": 1, "c": 2}
