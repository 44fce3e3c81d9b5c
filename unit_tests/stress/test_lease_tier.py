"""The at-least-once run of a consumer group (issue 20), short, on every test run: worker
processes share a group's messages while a seeded nemesis kill -9s and pauses workers and
kill -9s and pauses partition leaders; ``lease_checker`` judges their ledgers
(``stress_tests/lease_run.py``).

The seed comes from ``RAFTQ_STRESS_SEED`` or the clock, and is in the failure message:
``RAFTQ_STRESS_SEED=<seed> pytest unit_tests/stress/test_lease_tier.py`` replays it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stress_tests.lease_run import LeaseConfig, run_lease
from stress_tests.session import cluster_session
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

BASE_PORT = CLUSTER_BASE_PORTS["lease_run"]
SEED = int(os.environ.get("RAFTQ_STRESS_SEED", int(time.time()) % 100_000))


def test_a_group_processes_every_message_at_least_once_under_faults(tmp_path: Path) -> None:
    config = LeaseConfig(SEED, duration_s=20.0, messages=3_000)
    with cluster_session(tmp_path / "cluster", BASE_PORT) as cluster:
        report = run_lease(cluster, config, tmp_path / "ledgers")
    assert report.passed, "\n".join([f"replay with RAFTQ_STRESS_SEED={SEED}", *report.lines()])
