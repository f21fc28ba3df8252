"""The layers import downwards only (issue 19, item 4): ``api`` and ``engine`` do not
import each other, and only the composition root (``jobctl.daemon``) and the command
that starts it see both."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src" / "jobctl"


def imported(path: Path) -> set[str]:
    """Every jobctl module ``path`` imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n for n in names if n.startswith("jobctl")}


def _imports_of(package: str) -> dict[str, set[str]]:
    return {str(p.relative_to(SRC)): imported(p) for p in (SRC / package).rglob("*.py")}


RULES = {  # package -> what it must not import
    "api": ("jobctl.engine", "jobctl.daemon"),
    "engine": ("jobctl.api", "jobctl.daemon", "jobctl.cli", "jobctl.client"),
    "domain": ("jobctl.api", "jobctl.engine", "jobctl.store", "jobctl.daemon", "jobctl.cli"),
    "store": ("jobctl.api", "jobctl.engine", "jobctl.daemon", "jobctl.cli"),
}


@pytest.mark.parametrize("package", sorted(RULES))
def test_package_imports_no_layer_above(package: str) -> None:
    banned = RULES[package]
    found = {
        f"{module} imports {name}"
        for module, names in _imports_of(package).items()
        for name in names
        if any(name == b or name.startswith(b + ".") for b in banned)
    }
    assert not found, sorted(found)


def test_the_import_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from jobctl.engine.reaper import Reaper\n")
    assert "jobctl.engine.reaper" in imported(sample)
