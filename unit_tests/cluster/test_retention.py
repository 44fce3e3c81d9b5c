"""Retention with real processes (issue 10): a topic's retention by size and by age moves the
log start on every replica and removes the older rows from every broker's database, and
nothing else; a fetch below the log start answers 416 with the valid range; a new consumer
starts at the log start."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftq import Consumer, Producer
from stress_tests.cluster_view import replica_status
from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import checksums, partition_leader, post_when_ready
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
LIMITS = {"retention_check_period_s": "0.2"}
VALUE_CHARS = 10
RETENTION_BYTES = 1_000
"""100 messages of 10 characters."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["retention"]
    yield from running_cluster(tmp_path_factory.mktemp("retention"), port, LIMITS)


def _create(cluster: Cluster, topic: str, **retention: int) -> None:
    answer = post_when_ready(cluster, "/topics", {"name": topic, "partitions": 1, **retention})
    assert answer.status_code == 201, answer.text


def _produce(cluster: Cluster, topic: str, count: int) -> None:
    values = [f"{i:0{VALUE_CHARS}d}" for i in range(count)]
    with Producer(cluster.lb_url, topic, api_key=cluster.admin_key) as producer:
        acks = producer.produce_batch((v, None) for v in values)
    assert [a.offset for a in acks] == list(range(count))


def _everywhere(cluster: Cluster, topic: str, log_start: int, end: int) -> bool:
    """Every replica's log starts at ``log_start`` and its database holds exactly
    ``[log_start, end)``, the same rows on each."""
    statuses = replica_status(cluster.local, cluster.http, topic, 0)
    if len(statuses) != 3 or any(s["log_start_offset"] != log_start for s in statuses.values()):
        return False
    below, kept = checksums(cluster, topic, 0, log_start), checksums(cluster, topic, 0, end)
    counts_below = {count for count, _, _ in below.values()}
    kept_rows = {(count, digest) for count, digest, _ in kept.values()}
    return counts_below == {0} and len(kept_rows) == 1 and kept_rows.pop()[0] == end - log_start


def test_retention_by_size_keeps_the_newest_bytes_on_every_replica(cluster: Cluster) -> None:
    _create(cluster, "sized", retention_bytes=RETENTION_BYTES)
    _produce(cluster, "sized", 300)
    poll_until(lambda: _everywhere(cluster, "sized", 200, 300), WAIT_S, "retention by size")
    leader_url = cluster.broker_url(partition_leader(cluster, "sized", 0))
    query = "topic=sized&partition_id=0&offset=150&max_messages=10"
    below = cluster.http.get(f"{leader_url}/logs?{query}", timeout=10)
    assert below.status_code == 416, below.text
    assert "valid offsets are 200 to 300" in below.json()["message"]
    with Consumer(cluster.lb_url, "sized", api_key=cluster.admin_key) as consumer:
        first = poll_until(lambda: consumer.poll(10), WAIT_S, "a pop to answer")
    assert first[0].offset == 200


def test_retention_by_age_removes_old_messages_and_only_those(cluster: Cluster) -> None:
    # As a user would: the CLI, with the cluster's directory.
    cluster._cli(
        "topic", "create", "aged", "--retention-ms", "2000", "--dir", str(cluster.directory)
    )
    _create(cluster, "kept")  # no retention: a neighbour that must keep everything
    _produce(cluster, "aged", 50)
    _produce(cluster, "kept", 50)
    poll_until(lambda: _everywhere(cluster, "aged", 50, 50), WAIT_S, "retention by age")
    assert _everywhere(cluster, "kept", 0, 50)
