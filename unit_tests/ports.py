"""Free local ports for tests that start servers of their own."""

from __future__ import annotations

import socket

from ops.cluster_layout import DEFAULT_BROKER_COUNT, port_span


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it; the caller binds it soon)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CLUSTER_PORT_SPAN = 400
"""A local cluster uses ``base .. base+399`` (``ops.cluster_layout``: HTTP ports, then 100
Raft ports per broker)."""

CLUSTER_BASE_PORTS = {
    "end_to_end_sqlite": 17500,
    "end_to_end_postgresql": 18500,
    "lagging_replica": 19000,
    "spark": 19500,
    "fast_tier": 20100,
    "power_loss": 20600,
    "client_expiry": 21000,
    "acknowledgements": 21400,
    "benchmark_smoke": 22500,
    "snapshot_stall": 27000,
    "routing_changes": 27400,
    "late_requests": 27800,
    "replicated_limits": 28200,
    "access": 28600,
    "tls": 30000,
    "openapi_fuzz": 30400,
    "operations": 25000,
    "installed_client": 23500,
    "installed_server": 13000,
    "membership": 29400,
    "multi_host": 23900,
    "spark_standalone": 25800,
    "rereplication": 31500,
    "unknown_outcomes": 26400,
    "operations_faults": 22900,
    "pop_replays": 13400,
    "stopped_node_deadlines": 24400,
    "membership_nemesis": 32000,
    "lease_run": 16000,
    "groups": 16500,
    "streams": 10500,
    "async_producer": 14600,
    "legacy_raft_files": 15000,
    "partition_scaling": 11000,
}
"""Every test module's cluster in one table, so no two blocks overlap (a socket of the
previous module's cluster may still be in TIME_WAIT), all below the kernel's ephemeral range
(32768-60999: an outgoing connection's local port there could take a listening port) and
clear of the system services' ports (PostgreSQL, NATS, RabbitMQ, Redis, MariaDB) and of the
benchmark's defaults. ``unit_tests/test_ports.py`` checks it. The Spark standalone test's
master, workers and driver use 30800-30821."""

CLUSTER_BROKER_COUNTS = {
    "membership": 4,
    "rereplication": 4,
    "operations_faults": 4,
    "membership_nemesis": 6,
}
"""Modules whose cluster has more brokers than the default three: their block is longer
(the membership nemesis's: the highest broker id its CI plan can reach, broker ids only
grow)."""


def port_block(name: str) -> range:
    """The ports module ``name``'s cluster may use."""
    base = CLUSTER_BASE_PORTS[name]
    brokers = CLUSTER_BROKER_COUNTS.get(name, DEFAULT_BROKER_COUNT)
    return range(base, base + max(CLUSTER_PORT_SPAN, port_span(brokers) + 1))
