"""The proxy sits on top: it calls the domain apps, and no domain app imports it (the request record
it fills belongs to the audit log, apps/audit/records.py)."""

import ast
from pathlib import Path

APPS = Path(__file__).resolve().parents[2] / "apps"


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_no_domain_app_imports_the_proxy():
    offenders = [
        f"{path.relative_to(APPS.parent)} imports {module}"
        for path in APPS.rglob("*.py")
        if path.relative_to(APPS).parts[0] != "proxy"
        for module in imported_modules(path)
        if module == "apps.proxy" or module.startswith("apps.proxy.")
    ]

    assert not offenders, "\n".join(offenders)
