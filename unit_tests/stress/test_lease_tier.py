"""The at-least-once run of a consumer group (issue 20), short, on every test run: worker
processes share a group's messages while a seeded nemesis kill -9s and pauses workers,
kill -9s and pauses partition leaders, and cuts the power of the whole cluster once (right
after a worker's ack was answered; the cluster on the power-cut file system loses what it
had not synced, then restarts); ``lease_checker`` judges their ledgers
(``stress_tests/lease_run.py``). Without FUSE the test fails, saying why
(``prerequisites``).

The seed comes from ``RAFTQ_STRESS_SEED`` or the clock, and is in the failure message:
``RAFTQ_STRESS_SEED=<seed> pytest unit_tests/stress/test_lease_tier.py`` replays it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stress_tests.lease_run import LeaseConfig, run_fresh
from stress_tests.powercut import fuse_unavailable_reason
from unit_tests.ports import CLUSTER_BASE_PORTS
from unit_tests.stress.prerequisites import require

pytestmark = [pytest.mark.cluster, pytest.mark.tier]  # CI runs it; the default leaves it out

BASE_PORT = CLUSTER_BASE_PORTS["lease_run"]
SEED = int(os.environ.get("RAFTQ_STRESS_SEED", int(time.time()) % 100_000))


def test_a_group_processes_every_message_at_least_once_under_faults_and_a_power_cut(
    tmp_path: Path,
) -> None:
    require(fuse_unavailable_reason())
    config = LeaseConfig(SEED, duration_s=20.0, messages=3_000, power_cuts=1)
    report = run_fresh(tmp_path / "disk", BASE_PORT, config, tmp_path / "ledgers")
    assert report.passed, "\n".join([f"replay with RAFTQ_STRESS_SEED={SEED}", *report.lines()])
    assert report.verdict.info["acks_done_before_cuts"] >= 1, report.lines()
