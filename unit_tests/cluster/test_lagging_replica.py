"""A replica that stays down while far more messages arrive than memory may hold for it:
the partition keeps accepting writes (no 429), and the replica, once back, copies what left
memory from a peer's database until its database equals its peers'."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from unit_tests.cluster.client_ops import (
    Ack,
    checksums,
    create_topic,
    partition_brokers,
    partition_leader,
    produce,
    read_replica,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

LIMITS = {
    "partition_unflushed_messages_max": "2000",
    "partition_replica_lag_messages_max": "500",
    "flush_batch_messages_max": "500",
    "request_messages_max": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["lagging_replica"]
    yield from running_cluster(tmp_path_factory.mktemp("lagging"), port, LIMITS)


def test_writes_continue_while_a_replica_is_down_and_it_catches_up_from_a_peer(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "lag")
    producer = register_producer(cluster, "lag")
    leader = wait_until(lambda: partition_leader(cluster, "lag", 0), 10, "a partition leader")
    follower = next(b for b in partition_brokers(cluster, "lag")[0] if b != leader)
    cluster.kill(cluster.broker_name(follower))

    acks: list[Ack] = []
    for sequence in range(12):  # 6,000 messages: three times what memory may hold
        batch = [(None, f"lag-{sequence}-{i}") for i in range(500)]
        acks += produce(cluster, producer, sequence, batch, topic="lag", deadline_s=20)
    assert [a.offset for a in acks] == list(range(6000))

    cluster.up()  # the follower returns with its data, 6,000 messages behind
    wait_until(
        lambda: {(c, s, f) for c, s, f in checksums(cluster, "lag", 0, 6000).values()}
        == {next(iter(checksums(cluster, "lag", 0, 6000).values()))}
        and all(c == 6000 for c, _, _ in checksums(cluster, "lag", 0, 6000).values()),
        90,
        "the returned replica to copy what it missed",
    )
    stored = read_replica(cluster, follower, "lag", 0)
    assert [(m.offset, m.value) for m in stored] == [(a.offset, a.value) for a in acks]
