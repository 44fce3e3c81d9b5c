"""The project's own Python packages, for the tests that scan its source."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "protocol",
    "runtime",
    "broker",
    "manager",
    "load_balancer",
    "raftq",
    "spark_jobs",
    "stress_tests",
    "unit_tests",
)
