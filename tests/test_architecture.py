"""Dependencies point one way: zuke never imports zuke_gh; only zuke/cli imports typer;
``import zuke`` never loads typer, httpx or cryptography."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_importing(package: str, prefix: str) -> list[str]:
    return sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / package).rglob("*.py")
        if any(m == prefix or m.startswith(prefix + ".") for m in imports_of(path))
    )


def test_core_never_imports_the_github_package() -> None:
    assert modules_importing("zuke", "zuke_gh") == []


def test_only_the_cli_package_imports_typer() -> None:
    offenders = [m for m in modules_importing("zuke", "typer") if not m.startswith("zuke/cli/")]
    assert offenders == []


def test_importing_zuke_loads_no_heavy_dependency() -> None:
    probe = (
        "import sys, zuke; "
        "print(sorted({'typer', 'httpx', 'cryptography', 'rich', 'click'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
