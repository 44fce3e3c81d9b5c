"""No function of the project is longer than ``LINES_MAX`` lines (STYLE.md: functions short;
issue 21 set the bound): a long one is split where it changes subject."""

from __future__ import annotations

import ast
from pathlib import Path

from unit_tests.source_tree import PACKAGES, ROOT

LINES_MAX = 70


def _long_functions(root: Path, packages: tuple[str, ...]) -> list[str]:
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LINES_MAX:
                        where = path.relative_to(root)
                        found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_scanned_packages_are_all_there() -> None:
    """The scans here and in test_pysyncobj_private_names pass on a package that moved away:
    every one must still be where they look."""
    assert [p for p in PACKAGES if not (ROOT / p / "__init__.py").is_file()] == []


def test_no_function_is_longer_than_the_bound() -> None:
    assert _long_functions(ROOT, PACKAGES) == []


def test_the_check_sees_a_long_function_and_not_a_short_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(LINES_MAX))
    (tmp_path / "pkg" / "long.py").write_text(f"class C:\n  def long(self) -> None:\n{body}\n")
    (tmp_path / "pkg" / "short.py").write_text("def short() -> None:\n    pass\n")
    assert _long_functions(tmp_path, ("pkg",)) == [f"pkg/long.py:2 long ({LINES_MAX + 1} lines)"]
