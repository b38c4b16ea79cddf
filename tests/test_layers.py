"""The layers of the codebase, read from the source (ast), so a wrong import fails here before it
becomes a cycle: ``apps/core`` is the ground floor and imports no other app; the domain apps never
import the proxy, which sits on top of them."""

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "apps"


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


def imports_of(app: str, forbidden: str) -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules(app)
        for line, name in imported_modules(path)
        if name == forbidden or name.startswith(f"{forbidden}.")
    )


def domain_apps() -> list[str]:
    return sorted(
        path.name
        for path in APPS.iterdir()
        if (path / "apps.py").exists() and path.name not in ("core", "proxy")
    )


def test_core_imports_no_other_app():
    wrong = [found for app in [*domain_apps(), "proxy"] for found in imports_of("core", f"apps.{app}")]

    assert wrong == []


def test_no_domain_app_imports_the_proxy():
    wrong = [found for app in domain_apps() for found in imports_of(app, "apps.proxy")]

    assert wrong == []


def test_the_layer_checks_see_the_apps_and_their_imports():
    """A guard for the guards: the walk finds the apps, and an import it should catch is caught."""
    expected = {"accounts", "audit", "catalog", "keys", "organizations", "providers", "teams"}
    assert expected <= set(domain_apps())
    assert imports_of("catalog", "apps.organizations")  # the catalog's models name Organization
