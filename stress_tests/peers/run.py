"""Runs each peer in turn: start its 3-node cluster, sample its processes' memory idle, run
its scenarios (memory phase "load"), stop it, whatever happens. A peer that cannot start
(binary or Python client missing, ports taken, cluster not formed in time) leaves a line in
the table's title saying so, and the others still run.

One peer at a time, after RaftQ's cluster is down: no system's figures are measured while
another one's servers share the machine's two cores.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from stress_tests.bench_memory import MemorySampler
from stress_tests.bench_report import MemoryRow, Row
from stress_tests.peers import nats_redelivery, rabbitmq_redelivery
from stress_tests.peers.nats_bench import nats_async_rows, nats_rows
from stress_tests.peers.nats_cluster import NatsCluster
from stress_tests.peers.processes import port_open
from stress_tests.peers.rabbitmq_bench import rabbitmq_rows
from stress_tests.peers.rabbitmq_cluster import RabbitCluster
from stress_tests.polling import WaitTimeoutError, poll_until

IDLE_SAMPLES = 3
Log = Callable[[str], None]


class PeerCluster(Protocol):
    status: str

    def start(self) -> bool: ...
    def stop(self) -> None: ...
    def groups(self) -> dict[str, int | None]: ...


def missing_client(module: str, package: str) -> str | None:
    """Why the peer cannot be driven from Python, or None."""
    if importlib.util.find_spec(module) is None:
        return f"Python package {package} missing (pip install -r requirements-bench.txt)"
    return None


def taken_ports(ports: list[int]) -> list[int]:
    """Ports something already listens on (a leftover run, another program)."""
    return [port for port in ports if port_open(port)]


def run_peers(
    seconds: float, directory: Path, log: Log, only: str | None = None
) -> tuple[list[Row], list[MemoryRow], list[str]]:
    """(rows, memory rows, one status line per peer). ``only`` ("async-producer"): only
    the rows comparable to the asynchronous producer's (NATS's asynchronous publish)."""
    nats = NatsCluster(directory / "nats")
    rabbit = RabbitCluster(directory / "rabbitmq")
    plans: list[tuple[str, PeerCluster, str | None, list[int], Callable[[], list[Row]]]] = [
        (
            "NATS",
            nats,
            missing_client("nats", "nats-py"),
            nats.listen_ports,
            lambda: all_nats_rows(nats.servers, seconds, log, only),
        ),
        (
            "RabbitMQ",
            rabbit,
            missing_client("pika", "pika"),
            rabbit.listen_ports,
            lambda: all_rabbitmq_rows(rabbit.amqp_ports, seconds, log),
        ),
    ]
    if only is not None:
        plans = plans[:1]  # RabbitMQ has no asynchronous-publish row yet
    rows: list[Row] = []
    memory: list[MemoryRow] = []
    lines: list[str] = []
    for name, cluster, missing, ports, scenarios in plans:
        taken = taken_ports(ports)
        if missing is not None or taken:
            why = missing or f"ports {', '.join(map(str, taken))} already in use"
            lines.append(f"{name}: not run ({why})")
            continue
        peer_rows, peer_memory = run_one(name, cluster, scenarios, log)
        rows, memory = rows + peer_rows, memory + peer_memory
        lines.append(cluster.status)
    return rows, memory, lines


def all_nats_rows(servers: list[str], seconds: float, log: Log, only: str | None) -> list[Row]:
    if only is not None:
        return nats_async_rows(servers, seconds, log)
    rows = nats_rows(servers, seconds, log) + nats_async_rows(servers, seconds, log)
    log(f"  nats: {nats_redelivery.SCENARIO.name} ...")
    return rows + nats_redelivery.rows(servers, seconds)


def all_rabbitmq_rows(ports: list[int], seconds: float, log: Log) -> list[Row]:
    rows = rabbitmq_rows(ports, seconds, log)
    log(f"  rabbitmq: {rabbitmq_redelivery.SCENARIO.name} ...")
    return rows + rabbitmq_redelivery.rows(ports[0], seconds)


def run_one(
    name: str, cluster: PeerCluster, scenarios: Callable[[], list[Row]], log: Log
) -> tuple[list[Row], list[MemoryRow]]:
    sampler = MemorySampler(cluster.groups)
    try:
        log(f"starting {name} (3 nodes) ...")
        if not cluster.start():
            log(f"  {cluster.status}")
            return [], []
        sampler.start()
        try:
            poll_until(lambda: sampler.count("idle") >= IDLE_SAMPLES, 30.0, f"{name} idle memory")
        except WaitTimeoutError:
            log(f"  {name}: no idle memory sample")
        sampler.set_phase("load")
        return scenarios(), sampler.rows()
    finally:
        sampler.stop()
        log(f"stopping {name} ...")
        cluster.stop()
