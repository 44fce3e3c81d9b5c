"""The membership nemesis, short (issue 19), on every test run: a fresh cluster of four
brokers with fast re-replication; topics of replication factor 1, 2 and 3 (one with
``min_insync_replicas`` 3, one with size retention) under producers and consumers while a
seeded schedule kills and replaces a broker, drains and removes one (after a drain that must
be refused), adds a broker, adds and removes a manager, adds a partition, pauses a leader and,
where network partitions can be made, isolates one. Then every check of ``membership_run``.

The seed comes from ``RAFTQ_STRESS_SEED`` or the clock, and is in the failure message:
``RAFTQ_STRESS_SEED=<seed> pytest unit_tests/stress/test_membership_tier.py`` replays it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stress_tests.membership_plan import MEMBERSHIP_SHORT, MEMBERSHIP_SHORT_ISOLATION
from stress_tests.membership_run import MembershipConfig, membership_cluster, run_membership
from stress_tests.network_partition import available
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = [pytest.mark.cluster, pytest.mark.tier]  # CI runs it; the default leaves it out

BASE_PORT = CLUSTER_BASE_PORTS["membership_nemesis"]
SEED = int(os.environ.get("RAFTQ_STRESS_SEED", int(time.time()) % 100_000))


def test_membership_operations_under_load_keep_every_guarantee(tmp_path: Path) -> None:
    plan = MEMBERSHIP_SHORT_ISOLATION if available() is None else MEMBERSHIP_SHORT
    config = MembershipConfig(plan, SEED, duration_s_max=240.0, messages_max=20_000)
    with membership_cluster(tmp_path / "cluster", BASE_PORT) as cluster:
        report = run_membership(cluster, config, tmp_path / "report")
    assert report.passed, "\n".join([f"replay with RAFTQ_STRESS_SEED={SEED}", *report.lines()])
