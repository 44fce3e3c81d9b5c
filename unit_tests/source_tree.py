"""The project's own Python packages, for the tests that scan its source: the client's at
the root, the server's in server/ (paths from the repository's root)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "protocol",
    "server/runtime",
    "server/broker",
    "server/manager",
    "server/load_balancer",
    "server/ops",
    "raftq",
    "spark_jobs",
    "stress_tests",
    "unit_tests",
)
