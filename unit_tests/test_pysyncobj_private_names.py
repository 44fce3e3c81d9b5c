"""Only the replication layer's pysyncobj implementation touches pysyncobj's internals: a
private pysyncobj name anywhere else fails here (issue 21: one replication layer).

The names are read from pysyncobj's own source: every name-mangled member of its classes
(``_SyncObj__raftLog``), and every single-underscore member it defines (``_isLeader``,
``_syncObj``) that the project does not define for itself. ``runtime/replication/raft`` and
its tests (which pin pysyncobj's behaviour) may use them, and so does this file's example."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pysyncobj

from unit_tests.source_tree import PACKAGES, ROOT

ALLOWED = ("server/runtime/replication/raft/", "unit_tests/runtime/replication/raft/")


def _members(tree: ast.AST, skip: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """The classes of a module, and the private members they define or assign (not in
    classes based on one named in ``skip``)."""
    classes, members = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and not _bases(node) & skip:
            classes.add(node.name)
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                    members.add(item.attr)
    return classes, {m for m in members if m.startswith("_") and not m.endswith("__")}


def _bases(node: ast.ClassDef) -> set[str]:
    return {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}


def pysyncobj_private_names(project: list[Path]) -> tuple[set[str], re.Pattern[str], set[str]]:
    """pysyncobj's classes, a pattern for their mangled names, and the single-underscore
    names that are only pysyncobj's (the project's classes based on pysyncobj's do not
    count as defining a name: they override it)."""
    classes, members = set(), set()
    for path in Path(pysyncobj.__file__).parent.glob("*.py"):
        found = _members(ast.parse(path.read_text(encoding="utf-8")))
        classes |= found[0]
        members |= found[1]
    mangled = re.compile(r"\b_(?:" + "|".join(sorted(classes)) + r")__[A-Za-z]\w*")
    ours: set[str] = set()
    for path in project:
        ours |= _members(ast.parse(path.read_text(encoding="utf-8")), frozenset(classes))[1]
    return classes, mangled, members - ours


def private_uses(root: Path, packages: tuple[str, ...]) -> list[str]:
    files = [p for package in packages for p in sorted((root / package).rglob("*.py"))]
    allowed = [p for p in files if str(p.relative_to(root)).startswith(ALLOWED)]
    checked = [p for p in files if p not in allowed and p != Path(__file__).resolve()]
    classes, mangled, singles = pysyncobj_private_names(checked)
    found = []
    for path in checked:
        text = path.read_text(encoding="utf-8")
        names = set(mangled.findall(text))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr in singles:
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef) and _bases(node) & classes:
                names |= _overrides(node)
        found += [f"{path.relative_to(root)}: {name}" for name in sorted(names)]
    return found


def _overrides(node: ast.ClassDef) -> set[str]:
    """Private methods a class based on pysyncobj's defines: overrides of its internals."""
    return {
        item.name
        for item in node.body
        if isinstance(item, ast.FunctionDef)
        and item.name.startswith("_")
        and not item.name.endswith("__")
    }


def test_no_private_pysyncobj_name_outside_its_implementation() -> None:
    assert private_uses(ROOT, PACKAGES) == []


def test_the_check_sees_a_private_name_and_not_a_public_one(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "peeks.py").write_text(
        "def peek(node: object) -> object:\n"
        "    return node._isLeader(), node._SyncObj__raftLog, getattr(node, '_SyncObj__x')\n"
    )
    (tmp_path / "pkg" / "clean.py").write_text(
        "def clean(node: object) -> object:\n    return node.getStatus()\n"
    )
    assert private_uses(tmp_path, ("pkg",)) == [
        "pkg/peeks.py: _SyncObj__raftLog",
        "pkg/peeks.py: _SyncObj__x",
        "pkg/peeks.py: _isLeader",
    ]
