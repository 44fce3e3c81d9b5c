"""A snapshot of a partition holding a big backlog does not stall its Raft group (issue 7).

One replica is down and far behind, so the two live replicas keep every message in memory
(nothing may be evicted until the down replica flushes them). Each log compaction then
snapshots the whole backlog. When that snapshot was pickled and gzipped inside pysyncobj's
tick thread it froze the node for longer than the election timeout (measured before the
fix: ~0.7 s of tick thread per snapshot at 100k messages, ~1.4 s at 200k), so the follower
held an election: the leader's term moved. The test holds a backlog of at least 100k
messages across at least two snapshots of each live replica and requires the term to stay;
then the stopped replica returns and catches up from a snapshot the new writer wrote.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stress_tests.cluster_view import get_json
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import (
    create_topic,
    partition_brokers,
    partition_leader,
    produce,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

TOPIC = "stall"
BACKLOG_MESSAGES_MIN = 200_000
BATCH_MESSAGES = 5_000
PRODUCED_MESSAGES_MAX = 450_000
"""Bound on the whole test's produce: the two snapshots must come well before it."""
SNAPSHOTS_MIN = 2
CATCH_UP_S_MAX = 60.0
LIMITS = {
    # The down replica stays "in sync" (within the lag bound), so memory waits for it.
    "partition_replica_lag_messages_max": "480000",
    # Compact after every ~2 MiB of journal (~10 batches here), not 32 MiB.
    "raft_log_compaction_bytes_min": str(2 * 1024 * 1024),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["snapshot_stall"]
    yield from running_cluster(tmp_path_factory.mktemp("stall"), port, LIMITS)


def test_snapshots_of_a_big_backlog_hold_no_election(cluster: Cluster) -> None:
    create_topic(cluster, TOPIC)
    producer = register_producer(cluster, TOPIC)
    leader = poll_until(lambda: _leader(cluster), 20, "a partition leader")
    down = next(b for b in partition_brokers(cluster, TOPIC)[0] if b != leader)
    live = [b for b in partition_brokers(cluster, TOPIC)[0] if b != down]
    cluster.kill(cluster.broker_name(down))
    term = _term(cluster, leader)

    sequence = 0
    while sequence * BATCH_MESSAGES < BACKLOG_MESSAGES_MIN:
        _produce_batch(cluster, producer, sequence)
        sequence += 1
    dumps = {b: _dump_identity(cluster, b) for b in live}
    snapshots = dict.fromkeys(live, 0)
    while min(snapshots.values()) < SNAPSHOTS_MIN:
        assert sequence * BATCH_MESSAGES < PRODUCED_MESSAGES_MAX, f"snapshots seen: {snapshots}"
        _produce_batch(cluster, producer, sequence)
        sequence += 1
        for broker in live:
            identity = _dump_identity(cluster, broker)
            if identity != dumps[broker]:
                dumps[broker], snapshots[broker] = identity, snapshots[broker] + 1

    part = _partition(cluster, leader)
    assert part["end_offset"] == sequence * BATCH_MESSAGES
    assert part["end_offset"] - min(part["flushed_offsets"]) >= BACKLOG_MESSAGES_MIN, part
    seen = f"{part['end_offset']} messages produced, snapshots per broker {snapshots}"
    assert (_leader(cluster), _term(cluster, leader)) == (leader, term), f"election ({seen})"

    # The stopped replica, back, is behind the live ones' compacted logs: it catches up
    # through a dump written by the dump writer (sent, fsynced, loaded).
    cluster.up()
    end = part["end_offset"]
    poll_until(
        lambda: _partition(cluster, down)["end_offset"] == end or None,
        CATCH_UP_S_MAX,
        "the returned replica to load the leader's snapshot",
    )


def _produce_batch(cluster: Cluster, producer: str, sequence: int) -> None:
    # Distinct, poorly compressible values, as real payloads are.
    batch = [(None, f"{sequence}-{i}-" + os.urandom(24).hex()) for i in range(BATCH_MESSAGES)]
    produce(cluster, producer, sequence, batch, topic=TOPIC, partition_id=0, deadline_s=60)


def _leader(cluster: Cluster) -> int | None:
    try:
        return partition_leader(cluster, TOPIC, 0)
    except AssertionError:
        return None


def _raft_status(cluster: Cluster, broker: int) -> dict[str, Any]:
    body = get_json(cluster.internal, f"{cluster.broker_url(broker)}/raft_status", timeout_s=5)
    assert isinstance(body, dict), f"broker {broker} gave no /raft_status"
    for replica in body["replicas"]:
        if (replica["topic"], replica["partition_id"]) == (TOPIC, 0):
            return dict(replica)
    raise AssertionError(f"broker {broker} hosts no {TOPIC}/0")


def _term(cluster: Cluster, broker: int) -> int:
    return int(_raft_status(cluster, broker)["term"])


def _partition(cluster: Cluster, broker: int) -> dict[str, Any]:
    body = get_json(cluster.http, f"{cluster.broker_url(broker)}/partitions", timeout_s=5)
    assert isinstance(body, dict)
    return next(p for p in body["partitions"] if p["topic"] == TOPIC)


def _dump_identity(cluster: Cluster, broker: int) -> tuple[int, int] | None:
    """(inode, mtime) of the replica's full dump: a snapshot replaces the file."""
    path = Path(cluster.node(cluster.broker_name(broker))["data_dir"]) / "replicas" / "stall-0"
    try:
        status = (path / "raft.dump").stat()
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_mtime_ns
