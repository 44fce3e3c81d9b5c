"""Partition limits are replicated state, not each broker's command line (issue 7, item 5).

A partition's apply checks its limits (memory bounds, producers and consumers remembered).
They used to come from each broker's own ``--limit`` flags, so two replicas started with
different values applied the same commands differently: one accepted an append that another
refused, and their logs diverged. The manager now fixes them when it creates a topic,
records them with the topic and sends them in every replica's spec.

Real processes: broker-3 is restarted with a partition memory bound of 2 MiB while the others
keep the default (256 MiB); broker-2 is stopped, so nothing can leave memory (the stopped
replica has not flushed it); 3 MiB of messages are produced. Before, broker-3's replica
refused what the leader accepted (or, as leader, refused it all with 429); now every live
replica holds every acknowledged message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stress_tests.cluster_view import replica_status
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import create_topic, register_producer
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

TOPIC = "bounded"
WAIT_S = 60.0
BATCHES = 30
BATCH_MESSAGES = 100
VALUE = "x" * 1000
"""30 x 100 x 1 KB = 3 MB: past the 2 MiB that broker-3 alone is started with."""
SMALL_MEMORY = [
    "--limit",
    f"partition_unflushed_bytes_max={2 * 1024 * 1024}",
    "--limits-may-differ",  # else its start is refused: the others run with other limits
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["replicated_limits"]
    yield from running_cluster(tmp_path_factory.mktemp("limits"), port)


def test_replicas_apply_the_limits_the_manager_recorded(cluster: Cluster) -> None:
    nodes = cluster.local  # broker-3 becomes a child of this process: reaped below
    nodes.stop_node("broker-3")
    nodes.start_node("broker-3", SMALL_MEMORY)
    try:
        _produce_past_the_small_bound(cluster)
    finally:
        nodes.stop_node("broker-3")
        cluster.up()  # the whole cluster back as it was, every node started by the CLI


def _produce_past_the_small_bound(cluster: Cluster) -> None:
    create_topic(cluster, TOPIC)  # broker-3 hosts a replica of every partition
    poll_until(lambda: len(_live_replicas(cluster)) == 3, WAIT_S, "three replicas to answer")
    cluster.kill("broker-2")  # nothing leaves memory until every replica has flushed it
    producer = register_producer(cluster, TOPIC)
    for sequence in range(1, BATCHES + 1):
        _produce(cluster, producer, sequence)

    expected = BATCHES * BATCH_MESSAGES

    def caught_up() -> dict[str, int] | None:
        ends = {name: int(s["end_offset"]) for name, s in _live_replicas(cluster).items()}
        return (
            ends
            if set(ends) == {"broker-1", "broker-3"}
            and all(end == expected for end in ends.values())
            else None
        )

    poll_until(caught_up, WAIT_S, f"both live replicas to hold all {expected} messages")


def _live_replicas(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return replica_status(cluster.local, cluster.http, TOPIC, 0)


def _produce(cluster: Cluster, producer: str, sequence: int) -> None:
    body = {
        "topic": TOPIC,
        "producer_id": producer,
        "sequence": sequence,
        "messages": [{"message": VALUE} for _ in range(BATCH_MESSAGES)],
    }

    def acked() -> bool | None:
        response = cluster.post("/logs", body)
        if response.status_code == 503:
            return None  # an election after broker-2 was stopped: the retry is safe
        assert response.status_code == 201, f"batch {sequence}: {response.text}"
        return True

    poll_until(acked, WAIT_S, f"batch {sequence} to be acknowledged")


def test_every_replica_reports_the_limits_it_applies_with(cluster: Cluster) -> None:
    def all_three() -> dict[str, dict[str, Any]] | None:
        found = _live_replicas(cluster)
        return found if len(found) == 3 else None

    replicas = poll_until(all_three, WAIT_S, "three replicas to answer")
    assert {r["limits"]["unflushed_bytes_max"] for r in replicas.values()} == {256 * 1024**2}
