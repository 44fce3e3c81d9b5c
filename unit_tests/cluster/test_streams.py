"""Streaming consumption with real processes (issue 24): a stream of a partition
(``Consumer.stream``, Server-Sent Events from the partition's leader) reads every message
once and in order while its leader is killed in the middle; long polls of pops and fetches,
on the direct path and through the load balancer, answer once a message arrives rather than
empty. Bounded waits only: no test here times the service."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from raftq import Consumer, Producer, Record
from unit_tests.cluster.client_ops import create_topic, partition_leader
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
LONG_POLL_MS = 5_000
STREAMED = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["streams"]
    yield from running_cluster(tmp_path_factory.mktemp("streams"), port)


class Reader(threading.Thread):
    """Streams a partition into ``records`` until stopped (after its next record)."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.records: list[Record] = []
        self.failure: BaseException | None = None
        self._consumer = Consumer(
            cluster.lb_url, topic, consumer_id="stream-reader", api_key=cluster.admin_key
        )
        self._topic = topic

    def run(self) -> None:
        try:
            for record in self._consumer.stream(self._topic, 0, 0):
                self.records.append(record)
                if len(self.records) >= STREAMED:
                    return
        except BaseException as exc:  # reported by the test
            self.failure = exc
        finally:
            self._consumer.close()


def test_a_stream_reads_every_message_once_in_order_across_a_leader_kill(
    cluster: Cluster,
) -> None:
    create_topic(cluster, "streamed", 1)
    reader = Reader(cluster, "streamed")
    reader.start()
    values = [f"s{i}" for i in range(STREAMED)]
    with Producer(cluster.lb_url, "streamed", api_key=cluster.admin_key) as producer:
        producer.produce_batch(values[: STREAMED // 2])
        wait_until(lambda: len(reader.records) >= 50, WAIT_S, "the stream to start")
        leader = cluster.broker_name(partition_leader(cluster, "streamed", 0))
        cluster.kill(leader)
        try:
            producer.produce_batch(values[STREAMED // 2 :])
            reader.join(WAIT_S)
        finally:
            cluster.up()
    assert reader.failure is None, reader.failure
    assert not reader.is_alive(), f"only {len(reader.records)} of {STREAMED} streamed"
    assert [r.offset for r in reader.records] == list(range(STREAMED))
    assert [r.value for r in reader.records] == values


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "via-lb"])
def test_long_polls_answer_when_a_message_arrives(cluster: Cluster, direct: bool) -> None:
    topic = f"long-polled-{'direct' if direct else 'lb'}"
    create_topic(cluster, topic, 2)
    key = cluster.admin_key
    with (
        Consumer(cluster.lb_url, topic, direct=direct, api_key=key) as consumer,
        Producer(cluster.lb_url, topic, api_key=key) as producer,
    ):
        assert consumer.poll(10, wait_ms=200) == []  # nothing there: the wait ends empty
        late = Late(lambda: producer.produce_batch([("late", "k")]))
        popped = late.long_poll(lambda: consumer.poll(10, wait_ms=LONG_POLL_MS))
        assert [r.value for r in popped] == ["late"], "the poll waited for the message"
        where = popped[0]
        later = Late(lambda: producer.produce_batch([("later", "k")]))
        fetched = later.long_poll(
            lambda: consumer.fetch(
                topic, where.partition_id, where.offset + 1, 10, wait_ms=LONG_POLL_MS
            )
        )
        assert [r.value for r in fetched] == ["later"], "the fetch waited for the message"


class Late:
    """Produces once, half a second after a long poll began, and judges the poll's answer by
    when the produce was acknowledged, not by the clock: an empty answer is wrong only once
    the message was acknowledged well before it (on a loaded machine the produce itself may
    take longer than the wait; the poll is then repeated)."""

    DELAY_S = 0.5
    MARGIN_S = 1.0
    """How long a poll may take to answer empty after the acknowledgement: the wake-up, a
    round of the several-partition poll, the answer's way back."""

    def __init__(self, produce: Callable[[], object]) -> None:
        self._produce = produce
        self._acked_at: float | None = None
        self._failure: BaseException | None = None
        self._timer = threading.Timer(self.DELAY_S, self._run)

    def _run(self) -> None:
        try:
            self._produce()
            self._acked_at = time.monotonic()
        except BaseException as exc:  # reported by long_poll
            self._failure = exc

    def long_poll(self, poll: Callable[[], list[Record]]) -> list[Record]:
        self._timer.start()
        deadline = time.monotonic() + WAIT_S
        try:
            while time.monotonic() < deadline:
                got = poll()
                answered_at = time.monotonic()
                if got:
                    return got
                assert self._failure is None, self._failure
                acked = self._acked_at
                assert acked is None or answered_at - acked < self.MARGIN_S, (
                    f"answered empty {answered_at - acked:.2f} s after the message was acknowledged"
                )
            raise AssertionError(f"nothing within {WAIT_S} s (produce failed: {self._failure})")
        finally:
            self._timer.join()
