"""The stress fast tier (issue 3), on every test run: one real cluster, then each fast plan
(no faults; kill -9 of partition leaders; pause of a leader; manager and load-balancer
failover; whole-cluster restart) with its workload, faults, final read and checker.

The seed comes from ``RAFTQ_STRESS_SEED`` or the clock, and is in every failure message:
``RAFTQ_STRESS_SEED=<seed> pytest unit_tests/stress`` replays the same fault schedules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.cluster import LocalCluster
from stress_tests.chaos import fast_config
from stress_tests.runner import run
from stress_tests.scheduler import FaultPlan
from stress_tests.session import cluster_session
from stress_tests.tiers import FAST_TIER
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = [pytest.mark.cluster, pytest.mark.tier]  # CI runs it; the default leaves it out

BASE_PORT = CLUSTER_BASE_PORTS["fast_tier"]
SEED = int(os.environ.get("RAFTQ_STRESS_SEED", int(time.time()) % 100_000))


@pytest.fixture(scope="module")
def stress_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with cluster_session(tmp_path_factory.mktemp("stress-fast"), BASE_PORT) as cluster:
        yield cluster


@pytest.mark.parametrize("plan", FAST_TIER, ids=[plan.name for plan in FAST_TIER])
def test_fast_tier_plan_keeps_every_guarantee(
    stress_cluster: LocalCluster, plan: FaultPlan, tmp_path: Path
) -> None:
    report = run(stress_cluster, fast_config(plan, SEED), tmp_path)
    assert report.passed, "\n".join([f"replay with RAFTQ_STRESS_SEED={SEED}", *report.lines()])
