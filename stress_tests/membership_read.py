"""What a membership run reads of the cluster once it healed: ``GET /overview`` (moves,
brokers), each topic's replicas where the managers now place them, read from their log
start (retention) with their database checksums over ``[log start, end)``, and one probe
batch per partition (writable again?).

Unlike ``final_read``'s run (three brokers that hold every partition), replicas here move: a
partition is read from the brokers the managers place it on (``GET /partitions?topic=``),
and its convergence is awaited among those only (a broker restarted after its replicas
moved away may still report a stale replica until it is told to drop it).

The overview, placement and probes go through the load balancer with the admin API key, as
a client; the replicas are read straight from their brokers as a node (``node_session``).
Runs on the run's main thread; every wait is bounded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import requests

from ops.cluster import LocalCluster
from stress_tests.cluster_view import broker_replica, get_json
from stress_tests.final_read import (
    CONVERGE_TIMEOUT_S,
    database_sums,
    flushed_offset,
    read_replica,
)
from stress_tests.history import FinalRead, ReplicaLog
from stress_tests.membership_checks import ClusterState, WriteProbe, parse_overview
from stress_tests.polling import WaitTimeoutError, poll_until

CALL_TIMEOUT_S = 10.0
PROBE_BOUND_S = 30.0
"""A partition not taking a write this long after healing is not writable."""
PROBE_PAUSE_S = 0.2


def overview(session: requests.Session, lb_url: str) -> ClusterState | None:
    """The managers' ``GET /overview``, or None while no manager leader answers."""
    body = get_json(session, lb_url + "/overview", timeout_s=CALL_TIMEOUT_S)
    if body is None:
        return None
    try:
        return parse_overview(body)
    except (KeyError, TypeError, ValueError):
        return None


def placement(session: requests.Session, lb_url: str, topic: str) -> dict[int, tuple[int, ...]]:
    """partition id -> the broker ids of its replicas, as the managers place them now."""

    def ask() -> dict[int, tuple[int, ...]] | None:
        body = get_json(session, f"{lb_url}/partitions?topic={topic}", timeout_s=CALL_TIMEOUT_S)
        if not isinstance(body, dict):
            return None
        return {
            int(p["partition_id"]): tuple(int(r["broker_id"]) for r in p["replicas"])
            for p in body["partitions"]
        }

    return poll_until(ask, CONVERGE_TIMEOUT_S, f"the partitions of {topic}")


@dataclass(frozen=True, slots=True)
class Converged:
    log_start: int
    end: int


def wait_converged(
    cluster: LocalCluster,
    session: requests.Session,
    topic: str,
    partition_id: int,
    brokers: tuple[int, ...],
) -> Converged | None:
    """The partition's log start and end once every one of ``brokers`` reports the same,
    caught up, flushed to the end; None if not within ``CONVERGE_TIMEOUT_S``."""

    def agreed() -> Converged | None:
        status = [broker_replica(cluster, session, _name(b), topic, partition_id) for b in brokers]
        if any(s is None or s.get("caught_up") is not True for s in status):
            return None
        shapes = {(int(s["log_start_offset"]), int(s["end_offset"])) for s in status if s}
        if len(shapes) != 1:
            return None
        start, end = shapes.pop()
        flushed = [flushed_offset(cluster, session, _name(b), topic, partition_id) for b in brokers]
        if all(f is not None and f >= end for f in flushed):
            return Converged(start, end)
        return None

    try:
        return poll_until(agreed, CONVERGE_TIMEOUT_S, f"{topic}/{partition_id} to converge", 0.5)
    except WaitTimeoutError:
        return None


def read_topic(
    cluster: LocalCluster,
    node: requests.Session,
    client: requests.Session,
    topic: str,
) -> tuple[FinalRead, list[str]]:
    """Every replica of every partition of ``topic``; and the partitions that did not
    converge (read anyway: the checker then sees how they differ)."""
    replicas = []
    stuck = []
    placed = placement(client, cluster.lb_url, topic)
    for partition_id, brokers in sorted(placed.items()):
        converged = wait_converged(cluster, node, topic, partition_id, brokers)
        if converged is None:
            stuck.append(f"{topic}/{partition_id} on brokers {brokers}")
        for broker_id in brokers:
            try:
                replicas.append(
                    _read_replica(cluster, node, broker_id, topic, partition_id, converged)
                )
            except (requests.RequestException, WaitTimeoutError) as exc:
                # left out: the replica count check flags the partition
                stuck.append(f"{topic}/{partition_id} on broker {broker_id} unreadable: {exc}")
    return FinalRead(tuple(replicas), len(placed)), stuck


def _read_replica(
    cluster: LocalCluster,
    node: requests.Session,
    broker_id: int,
    topic: str,
    partition_id: int,
    converged: Converged | None,
) -> ReplicaLog:
    broker = _name(broker_id)
    status = broker_replica(cluster, node, broker, topic, partition_id) or {}
    start = int(status.get("log_start_offset", 0))
    entries = read_replica(cluster, node, broker, topic, partition_id, start)
    shape = converged or Converged(start, start + len(entries))
    sums = database_sums(cluster, node, broker, topic, partition_id, shape.end, shape.log_start)
    return ReplicaLog(broker_id, partition_id, entries, sums, start)


def _name(broker_id: int) -> str:
    return f"broker-{broker_id}"


def probe_partition(
    client: requests.Session, lb_url: str, topic: str, partition_id: int, producer_id: str
) -> WriteProbe:
    """Register ``producer_id`` and produce one batch to the partition, resent with the same
    sequence until acknowledged or ``PROBE_BOUND_S`` passed."""
    started_s = time.monotonic()
    body = {
        "producer_id": producer_id,
        "topic": topic,
        "partition_id": partition_id,
        "sequence": 1,
        "messages": [{"message": f"{producer_id}/probe"}],
    }
    registered = False
    detail = "no attempt"
    while time.monotonic() - started_s < PROBE_BOUND_S:
        try:
            if not registered:
                with client.post(
                    lb_url + "/producers",
                    json={"topic": topic, "producer_id": producer_id},
                    timeout=CALL_TIMEOUT_S,
                ) as response:
                    registered = response.status_code in (200, 201)
                    detail = f"register: {response.status_code} {response.text[:200]}"
            if registered:
                with client.post(lb_url + "/logs", json=body, timeout=CALL_TIMEOUT_S) as response:
                    if response.status_code == 201:
                        return WriteProbe(topic, partition_id, True, time.monotonic() - started_s)
                    detail = f"{response.status_code} {response.text[:200]}"
        except requests.RequestException as exc:
            detail = repr(exc)[:200]
        time.sleep(PROBE_PAUSE_S)
    return WriteProbe(topic, partition_id, False, time.monotonic() - started_s, detail)
