"""A retry after a partition was added lands where its first attempt did (issue 7, item 2).

Adding a partition changes where keyed and unkeyed messages go and which partitions a pop
visits. A retried batch used to be cut again over the new count: the partitions that had
stored their part answered with offset counts that no longer matched (500 on every retry),
and the part routed to the new partition was appended again (a duplicate). A request now
carries the partition count of its first attempt (``partition_count``), the manager routes
over it, and a Spark write fixes it in the driver so a retried task does the same.

Real processes: one SQLite cluster for the module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from protocol.routing import pop_order
from protocol.types import NewMessage, PartitionId
from raftq.admin import Admin
from raftq.client_limits import ClientLimits
from spark_jobs import cluster_io
from spark_jobs.options import Endpoint
from spark_jobs.rows import TopicBatch
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import end_offset, register_consumer, register_producer
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

MESSAGES = 60
ACTIVE_WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["routing_changes"]
    yield from running_cluster(tmp_path_factory.mktemp("routing"), port)


def create_topic(cluster: Cluster, name: str, partitions: int) -> None:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.create_topic(name, partitions)
    wait_active(cluster, name, partitions)


def add_partition(cluster: Cluster, name: str, active_after: int) -> None:
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        admin.add_partition(name)
    wait_active(cluster, name, active_after)


def wait_active(cluster: Cluster, name: str, count: int) -> None:
    def active() -> bool:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            found = admin.partitions(name)
        return sum(p.active for p in found) == count

    poll_until(active, ACTIVE_WAIT_S, f"{name} to have {count} active partitions")


def leader_end_offset(cluster: Cluster, topic: str, partition_id: int) -> int:
    """The partition's end offset, once its Raft group has a leader to ask (a partition just
    added may still be electing one)."""

    def ask() -> int | None:
        try:
            return end_offset(cluster, topic, partition_id)
        except AssertionError:
            return None

    return poll_until(ask, ACTIVE_WAIT_S, f"{topic}/{partition_id} to have a leader")


def keyed_batch(prefix: str) -> list[dict[str, Any]]:
    return [{"message": f"{prefix}-{i}", "key": f"key-{i}"} for i in range(MESSAGES)]


def post_until_acked(cluster: Cluster, body: dict[str, Any]) -> list[dict[str, int]]:
    def attempt() -> list[dict[str, int]] | None:
        response = cluster.post("/logs", body)
        if response.status_code in (429, 503):
            return None
        assert response.status_code == 201, response.text
        offsets: list[dict[str, int]] = response.json()["offsets"]
        return offsets

    return poll_until(attempt, ACTIVE_WAIT_S, "the batch to be acknowledged")


def test_a_batch_retried_after_a_partition_was_added_is_not_stored_again(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "moved", 2)
    producer = register_producer(cluster, "moved")
    body = {
        "topic": "moved",
        "producer_id": producer,
        "sequence": 1,
        "messages": keyed_batch("m"),
        "partition_count": 2,
    }
    first = post_until_acked(cluster, body)
    assert {o["partition_id"] for o in first} == {0, 1}
    add_partition(cluster, "moved", 3)

    assert post_until_acked(cluster, body) == first  # the retry: the original offsets
    per_partition = Counter(o["partition_id"] for o in first)
    for partition_id in (0, 1, 2):
        assert leader_end_offset(cluster, "moved", partition_id) == per_partition[partition_id]


def test_a_pop_retried_after_a_partition_was_added_gets_its_ranges_back(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "popped", 2)
    producer = register_producer(cluster, "popped")
    post_until_acked(
        cluster,
        {"topic": "popped", "producer_id": producer, "sequence": 1, "messages": keyed_batch("p")},
    )
    consumer = register_consumer(cluster, "popped")
    pinned = {"partition_count": 2}
    request_id = order_changing_request_id(consumer)
    first = pop_pinned(cluster, consumer, request_id, pinned)
    assert len(first) == MESSAGES // 2
    add_partition(cluster, "popped", 3)

    assert pop_pinned(cluster, consumer, request_id, pinned) == first
    rest = pop_pinned(cluster, consumer, "the-next-pop", {})  # not an "r<n>" id
    seen = [(m["partition_id"], m["offset"]) for m in first + rest]
    assert len(seen) == len(set(seen)) == MESSAGES  # nothing skipped, nothing twice


def order_changing_request_id(consumer: str) -> str:
    """A request id whose pop starts at another partition once there are three: a retry
    routed by the new count would claim a fresh range there and skip the first one."""
    two, three = [PartitionId(0), PartitionId(1)], [PartitionId(p) for p in range(3)]
    return next(
        f"r{n}"
        for n in range(1000)
        if pop_order(two, consumer, f"r{n}", 0)[0] != pop_order(three, consumer, f"r{n}", 0)[0]
    )


def pop_pinned(
    cluster: Cluster, consumer: str, request_id: str, extra: dict[str, int]
) -> list[dict[str, Any]]:
    def attempt() -> list[dict[str, Any]] | None:
        response = cluster.get(
            "/logs",
            consumer_id=consumer,
            max_messages=MESSAGES // 2 if extra else MESSAGES,
            request_id=request_id,
            **extra,
        )
        if response.status_code in (429, 503):
            return None
        assert response.status_code == 200, response.text
        messages: list[dict[str, Any]] = response.json()["messages"]
        return messages

    return poll_until(attempt, ACTIVE_WAIT_S, "the pop to be answered")


def endpoint(cluster: Cluster) -> Endpoint:
    return Endpoint(cluster.lb_url, cluster.admin_key)


def test_a_spark_task_retried_after_a_partition_was_added_writes_nothing_twice(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "spark", 2)
    limits = ClientLimits()
    counts = {"spark": cluster_io.active_partition_count(endpoint(cluster), "spark", limits)}
    batches = [
        TopicBatch("spark", tuple(NewMessage(value=f"s{b}-{i}", key=f"k{i}") for i in range(20)))
        for b in range(3)
    ]

    def task_attempt() -> cluster_io.TaskWriteSummary:
        return cluster_io.write_batches(
            endpoint(cluster), batches, lambda _t: "spark-job-0", limits, partition_counts=counts
        )

    first = task_attempt()
    add_partition(cluster, "spark", 3)
    retried = task_attempt()  # a retried task: the same producer id, sequences and rows

    assert first.rows == retried.rows == 60
    assert leader_end_offset(cluster, "spark", 2) == 0
    assert leader_end_offset(cluster, "spark", 0) + leader_end_offset(cluster, "spark", 1) == 60


def test_a_spark_task_writing_to_several_topics_retried_after_partitions_were_added(
    cluster: Cluster,
) -> None:
    """A write to a ``topic`` column: the driver fixes every topic's count at once
    (``active_partition_counts``). Before, each task attempt's producers read their topic's
    count themselves, so a retry after a partition was added cut its batches differently and
    stored them again in the new partition."""
    for topic in ("multi-a", "multi-b"):
        create_topic(cluster, topic, 2)
    limits = ClientLimits()
    counts = cluster_io.active_partition_counts(endpoint(cluster), limits)
    assert counts["multi-a"] == counts["multi-b"] == 2
    batches = [
        TopicBatch(
            topic, tuple(NewMessage(value=f"{topic}{b}-{i}", key=f"k{i}") for i in range(20))
        )
        for b in range(3)
        for topic in ("multi-a", "multi-b")
    ]

    def task_attempt() -> cluster_io.TaskWriteSummary:
        return cluster_io.write_batches(
            endpoint(cluster),
            batches,
            lambda t: f"spark-multi-{t}",
            limits,
            partition_counts=counts,
        )

    first = task_attempt()
    for topic in ("multi-a", "multi-b"):
        add_partition(cluster, topic, 3)
    retried = task_attempt()

    assert first.rows == retried.rows == 120
    for topic in ("multi-a", "multi-b"):
        assert leader_end_offset(cluster, topic, 2) == 0
        stored = leader_end_offset(cluster, topic, 0) + leader_end_offset(cluster, topic, 1)
        assert stored == 60, topic
