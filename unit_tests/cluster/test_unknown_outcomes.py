"""Answers that do not prove nothing was done, with real processes (issue 19, items 6 and 9).

A whole-topic consumer whose pop claims a range on one partition and is then refused by
another (its consumer table is full: ``partition_consumers_max``) loses nothing: every
message is popped exactly once, through the load balancer and on the direct path.

A producer whose lease the managers forgot while it believed it fresh (a renewal they never
saw) gets 404 UNKNOWN_PRODUCER for a batch whose earlier attempt was stored: it registers
again under the same id and resends the same sequence, which the partition recognises, so
the message is stored once and acknowledged with its original offset."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

import raftq.producer
from protocol.errors import ErrorCode
from raftq import ApiError, Consumer, Producer
from raftq.lease import Lease
from unit_tests.cluster.client_ops import (
    RETRY_STATUSES,
    create_topic,
    partition_leader,
    register_consumer,
)
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

CONSUMERS_MAX = 2
EXPIRY_S = 4.0
LIMITS = {
    "partition_consumers_max": str(CONSUMERS_MAX),
    "client_idle_expiry_s": str(EXPIRY_S),
}
WAIT_S = 60.0
ROUNDS = 12
PER_ROUND = 3
POLL_MAX = 10
"""Above what one round produces: a pop that claims a round's messages on partition 0 still
has room, so it goes on to the full partition 1 whenever it visits partition 0 first."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["unknown_outcomes"]
    yield from running_cluster(tmp_path_factory.mktemp("unknown-outcomes"), port, LIMITS)


class FullTable:
    """``CONSUMERS_MAX`` consumers registered for partition 1 only, which fill its consumer
    table. They pop at every round, so the partition's idle expiry never frees a slot; a
    registration the managers forgot between rounds (``client_idle_expiry_s`` is short here,
    and a loaded machine makes rounds long) is renewed under the same id, as a client does."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self._cluster = cluster
        self._topic = topic
        self._ids = [register_consumer(cluster, topic, 1) for _ in range(CONSUMERS_MAX)]
        self._pops = 0

    def touch(self) -> None:
        for consumer_id in self._ids:
            self._pops += 1
            request_id = f"{consumer_id}-{self._pops}"
            wait_until(partial(self._popped, consumer_id, request_id), WAIT_S, "a table pop")

    def _popped(self, consumer_id: str, request_id: str) -> bool:
        answer = self._cluster.get(
            "/logs", consumer_id=consumer_id, max_messages=1, request_id=request_id
        )
        if answer.status_code == 404 and _code(answer.json()) == ErrorCode.UNKNOWN_CONSUMER:
            body = {"topic": self._topic, "partition_id": 1, "consumer_id": consumer_id}
            renewed = self._cluster.post("/consumers", body)
            assert renewed.status_code in (200, 201, 503), renewed.text
            return False
        assert answer.status_code in (200, *RETRY_STATUSES), answer.text
        return answer.status_code == 200


def _code(body: dict[str, Any]) -> ErrorCode | None:
    value = body.get("error_code")
    return next((code for code in ErrorCode if code.value == value), None)


@pytest.mark.parametrize("direct", [False, True], ids=["via-lb", "direct"])
def test_a_pop_refused_by_a_full_partition_after_another_claimed_loses_nothing(
    cluster: Cluster, direct: bool
) -> None:
    topic = f"full-table-{'direct' if direct else 'lb'}"
    create_topic(cluster, topic, partitions=2)
    table = FullTable(cluster, topic)
    table.touch()
    popped: list[int] = []
    refused = 0
    with (
        Producer(cluster.lb_url, topic, partition_id=0, api_key=cluster.admin_key) as producer,
        Consumer(cluster.lb_url, topic, direct=direct, api_key=cluster.admin_key) as consumer,
    ):
        for number in range(ROUNDS):
            producer.produce_batch(f"{number}-{i}" for i in range(PER_ROUND))
            table.touch()
            refused += _poll_into(consumer, popped)
        expected = set(range(ROUNDS * PER_ROUND))
        for _ in range(10 * ROUNDS):  # bounded: each poll claims from partition 0 or nothing
            if set(popped) >= expected:
                break
            table.touch()
            refused += _poll_into(consumer, popped)
        for _ in range(3):  # and nothing more comes: no range is handed out twice
            table.touch()
            refused += _poll_into(consumer, popped)
    missing = sorted(set(range(ROUNDS * PER_ROUND)) - set(popped))
    assert not missing, f"never delivered: {missing} ({refused} polls refused with 409)"
    assert sorted(popped) == list(range(ROUNDS * PER_ROUND)), "some offset popped twice"
    assert refused > 0, "no poll met the full partition: the test proved nothing"


def _poll_into(consumer: Consumer, popped: list[int]) -> int:
    """One poll's offsets appended to ``popped``; 1 if the poll was refused with 409."""
    try:
        records = consumer.poll(POLL_MAX)
    except ApiError as exc:
        if exc.code is not ErrorCode.TOO_MANY:
            raise
        return 1
    assert all(r.partition_id == 0 for r in records)
    popped.extend(r.offset for r in records)
    return 0


def test_a_producer_whose_lease_expired_registers_again_and_resends_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = "expired-lease"
    producer_id = "expired-lease-producer"
    create_topic(cluster, topic)
    # The client believes its lease fresh while the managers forget it: as when its renewals
    # never reached them, or their leader's clock runs ahead.
    monkeypatch.setattr(raftq.producer, "Lease", lambda: Lease(clock_s=lambda: 0.0))
    with Producer(
        cluster.lb_url, topic, producer_id=producer_id, direct=False, api_key=cluster.admin_key
    ) as producer:
        assert [a.offset for a in producer.produce_batch(["first"])] == [0]
        # The next batch's first attempt: stored at the partition leader, its answer lost.
        _store_at_leader(cluster, topic, producer_id, 1, "second")
        wait_until(
            _forgotten(cluster, topic, producer_id), WAIT_S, "the managers to forget the producer"
        )
        acked = producer.produce_batch(["second"])  # sequence 1 again: 404 first
    assert [(a.partition_id, a.offset) for a in acked] == [(0, 1)]
    stored = cluster.get("/logs", topic=topic, partition_id=0, offset=0, max_messages=10)
    assert stored.status_code == 200, stored.text
    assert [m["message"] for m in stored.json()["messages"]] == ["first", "second"]


def _store_at_leader(
    cluster: Cluster, topic: str, producer_id: str, sequence: int, value: str
) -> None:
    body = {
        "topic": topic,
        "partition_id": 0,
        "producer_id": producer_id,
        "sequence": sequence,
        "messages": [{"message": value}],
    }

    def stored() -> bool:
        url = cluster.broker_url(partition_leader(cluster, topic, 0))
        answer = cluster.http.post(f"{url}/logs", json=body, timeout=30)
        return answer.status_code == 201

    wait_until(stored, WAIT_S, f"{value!r} stored at the leader")


def _forgotten(cluster: Cluster, topic: str, producer_id: str) -> Callable[[], bool]:
    """True once the managers answer 404 UNKNOWN_PRODUCER. The probe repeats the first
    batch (sequence 0), which a partition that still knows the producer answers as a
    duplicate: it stores nothing, and it keeps the partition's memory of the producer fresh."""
    body: dict[str, Any] = {
        "topic": topic,
        "partition_id": 0,
        "producer_id": producer_id,
        "sequence": 0,
        "messages": [{"message": "first"}],
    }

    def probe() -> bool:
        answer = cluster.post("/logs", body)
        if answer.status_code == 201:
            assert answer.json()["offsets"] == [{"partition_id": 0, "offset": 0}], answer.text
            return False
        error = answer.json().get("error_code") if answer.status_code == 404 else None
        return error == ErrorCode.UNKNOWN_PRODUCER.value

    return probe
