"""The benchmark's peers for real: a 3-node NATS JetStream cluster and a 3-node RabbitMQ
cluster started, driven through every scenario for a fraction of a second, and stopped with
nothing left listening.

Skipped only where a peer's server binary (Debian's ``nats-server`` / ``rabbitmq-server``) or
its Python client (``requirements-bench.txt``: nats-py, pika; ``scripts/bench.sh`` installs
all four) is absent. Ports differ from the benchmark's defaults, so a benchmark running at the
same time does not collide with them. No figure is asserted, only that each was measured.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from stress_tests.bench_report import Row
from stress_tests.peers import nats_redelivery, rabbitmq_redelivery
from stress_tests.peers.nats_bench import nats_rows
from stress_tests.peers.nats_cluster import NatsCluster
from stress_tests.peers.processes import find_binary, port_open
from stress_tests.peers.rabbitmq_bench import rabbitmq_rows
from stress_tests.peers.rabbitmq_cluster import RABBITMQ_BIN, RabbitCluster

pytestmark = [pytest.mark.cluster, pytest.mark.long]  # a benchmark's peers: not a guarantee

NATS_BASE_PORT = 24500
RABBIT_BASE_PORT = 26771


def needs(binary: str | None, module: str, what: str) -> pytest.MarkDecorator:
    missing = binary is None or importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{what} or its Python client is not installed")


def assert_every_row_measured(rows: list[Row], count: int) -> None:
    """A rate, or (redelivery rows) a latency, in every row."""
    assert len(rows) == count, rows
    for row in rows:
        assert row.ok and row.error is None, row
        assert (row.msgs_per_s or 0) > 0 or row.p50_ms is not None, row


@needs(find_binary("nats-server"), "nats", "nats-server")
def test_nats_cluster_runs_every_scenario_and_stops(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path, base_port=NATS_BASE_PORT)
    try:
        assert cluster.start(), cluster.status
        assert_every_row_measured(nats_rows(cluster.servers, 0.3, lambda _line: None), 6)
        assert_every_row_measured(nats_redelivery.rows(cluster.servers, 0.3), 2)
    finally:
        cluster.stop()
    assert not any(port_open(port) for port in cluster.listen_ports)


@needs(find_binary("rabbitmq-server", (RABBITMQ_BIN,)), "pika", "rabbitmq-server")
def test_rabbitmq_cluster_runs_every_scenario_and_stops(tmp_path: Path) -> None:
    cluster = RabbitCluster(tmp_path, base_port=RABBIT_BASE_PORT)
    try:
        assert cluster.start(), cluster.status
        assert len(cluster.running_nodes()) == 3
        assert_every_row_measured(rabbitmq_rows(cluster.amqp_ports, 0.3, lambda _line: None), 6)
        assert_every_row_measured(rabbitmq_redelivery.rows(cluster.amqp_ports[0], 0.3), 1)
    finally:
        cluster.stop()
    assert not any(port_open(port) for port in cluster.listen_ports)
