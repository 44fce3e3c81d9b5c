"""Seven nodes as on seven hosts (issue 11): the load balancer, three managers and three
brokers each bound to its own loopback address (127.0.0.2 .. 127.0.0.8) and started from its
own node file, clients that are given only the load balancer's URL, and the fault tier's
kill and isolate faults applied to one host at a time, each run checked as the fault tiers
check theirs (nothing acknowledged lost, nothing duplicated, replicas identical).

Network isolation needs root, cgroup v2 and iptables (``stress_tests/network_partition.py``);
CI runs as root on such a machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ops.cluster import LocalCluster
from runtime.node_config import parse_node_file
from stress_tests.chaos import fast_config
from stress_tests.network_partition import available
from stress_tests.runner import run
from stress_tests.scheduler import FaultPlan
from stress_tests.session import cluster_session
from stress_tests.tiers import LEADER_KILLS, MANAGER_LB_FAILOVER, PARTITIONS
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

BASE_PORT = CLUSTER_BASE_PORTS["multi_host"]
HOSTS = tuple(f"127.0.0.{i}" for i in range(2, 9))
SEED = int(os.environ.get("RAFTQ_STRESS_SEED", int(time.time()) % 100_000))
PLANS = (
    pytest.param(PARTITIONS, id=PARTITIONS.name, marks=pytest.mark.tier),
    pytest.param(LEADER_KILLS, id=LEADER_KILLS.name, marks=pytest.mark.long),
    pytest.param(MANAGER_LB_FAILOVER, id=MANAGER_LB_FAILOVER.name, marks=pytest.mark.long),
)
"""Isolating one host runs on every test run (the fast tier has no network partitions); the
kills and the managers' failover, which the fast tier runs on one host every time, run here
with ``-m long`` (CI's 20 minutes)."""


@pytest.fixture(scope="module")
def hosts_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("multi-host")
    with cluster_session(directory, BASE_PORT, hosts=HOSTS) as cluster:
        yield cluster


def test_each_node_has_its_own_host_and_file(hosts_cluster: LocalCluster) -> None:
    assert hosts_cluster.lb_url == f"http://127.0.0.2:{BASE_PORT}"
    files = {}
    for name, host in zip(hosts_cluster.node_names, HOSTS, strict=True):
        node = hosts_cluster.node(name)
        files[name] = parse_node_file(node.config_file.read_text(), str(node.config_file))
        assert files[name].settings["host"] == host, name
        assert node.http_address.startswith(f"http://{host}:"), name
    # The managers know each other by their own hosts' addresses.
    peers = {p.raft_address for p in files["manager-1"].peers}
    assert peers == {f"127.0.0.{2 + i}:{BASE_PORT + 20 + i}" for i in (1, 2, 3)}


@pytest.mark.parametrize("plan", PLANS)
def test_faults_on_one_host_at_a_time_keep_every_guarantee(
    hosts_cluster: LocalCluster, plan: FaultPlan, tmp_path: Path
) -> None:
    if plan is PARTITIONS:
        assert available() is None, f"network isolation is needed here: {available()}"
    report = run(hosts_cluster, fast_config(plan, SEED), tmp_path)
    assert report.passed, "\n".join([f"replay with RAFTQ_STRESS_SEED={SEED}", *report.lines()])
