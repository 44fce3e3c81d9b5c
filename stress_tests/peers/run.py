"""Runs every peer's cluster and scenarios (placeholder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from stress_tests.bench_report import MemoryRow, Row


def run_peers(
    seconds: float, directory: Path, log: Callable[[str], None]
) -> tuple[list[Row], list[MemoryRow], list[str]]:
    return [], [], ["peers: not implemented yet"]
