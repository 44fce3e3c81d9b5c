"""The asynchronous producer with real processes (issue 24): eight threads share one
``AsyncProducer`` and send thousands of keyed messages; every future resolves, and every
message is stored exactly once, in send order per key, also when a partition's leader is
killed (kill -9) in the middle. Bounded waits only: no test here times the service."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from raftq import Admin, AsyncProducer, Consumer, PartitionOffset, Record
from unit_tests.cluster.client_ops import create_topic, partition_leader
from unit_tests.cluster.harness import Cluster, running_cluster, wait_until
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 120.0
THREADS = 8
KEYS_PER_THREAD = 4
PARTITIONS = 3
READ_BATCH = 1_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["async_producer"]
    yield from running_cluster(tmp_path_factory.mktemp("async_producer"), port)


Sent = dict[str, list[tuple[str, Future[PartitionOffset]]]]
"""key → (value, future) in send order."""


class Senders:
    """``THREADS`` threads sending keyed messages through one producer: each thread its own
    keys, each value ``<key>:<n>`` with ``n`` counting up per key."""

    def __init__(self, producer: AsyncProducer, per_thread: int | None) -> None:
        self.sent: Sent = defaultdict(list)
        self.failures: list[BaseException] = []
        self.stop = threading.Event()
        self._producer = producer
        self._per_thread = per_thread
        self._threads = [
            threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(THREADS)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(WAIT_S)
        assert not any(t.is_alive() for t in self._threads), "a sender hung"
        assert not self.failures, self.failures

    def acknowledged(self) -> int:
        return sum(1 for sent in list(self.sent.values()) for _, f in list(sent) if f.done())

    def _run(self, thread: int) -> None:
        keys = [f"t{thread}k{k}" for k in range(KEYS_PER_THREAD)]
        try:
            n = 0
            while not self.stop.is_set() and (self._per_thread is None or n < self._per_thread):
                key = keys[n % KEYS_PER_THREAD]
                value = f"{key}:{n // KEYS_PER_THREAD}"
                self.sent[key].append((value, self._producer.send(value, key=key)))
                n += 1
        except BaseException as exc:  # reported by join
            self.failures.append(exc)


def read_topic(cluster: Cluster, topic: str) -> dict[int, list[Record]]:
    """Every stored message of each partition, in offset order."""
    stored: dict[int, list[Record]] = {}
    with Consumer(cluster.lb_url, topic, api_key=cluster.admin_key) as consumer:
        for partition in range(PARTITIONS):
            records: list[Record] = []
            while batch := consumer.fetch(topic, partition, len(records), READ_BATCH):
                records.extend(batch)
            stored[partition] = records
    return stored


def check_exactly_once_in_order(stored: dict[int, list[Record]], sent: Sent) -> int:
    """Every acknowledged message is at its acknowledged place, no value is stored twice,
    and each key's stored values keep its send order. Returns the acknowledged count."""
    everything = [r for records in stored.values() for r in records]
    twice = [v for v, n in Counter(r.value for r in everything).items() if n > 1]
    assert not twice, f"stored more than once: {twice[:5]}"
    for partition, records in stored.items():
        assert [r.offset for r in records] == list(range(len(records))), partition
    acknowledged = 0
    for key, messages in sent.items():
        for value, future in messages:
            if future.exception(0) is None:
                ack = future.result(0)
                assert stored[ack.partition_id][ack.offset].value == value
                acknowledged += 1
        numbers = [int(r.value.split(":")[1]) for r in everything if r.key == key]
        assert numbers == sorted(numbers), f"{key} stored out of send order"
    return acknowledged


def leaders_known(cluster: Cluster, topic: str) -> None:
    """Wait until the managers name every partition's leader: the producer's partition map
    comes from them, and ``create_topic`` waits for the brokers' own view, which the managers
    learn at their next poll. Sent before that, every batch goes through the load balancer
    (rightly), and the direct path is not exercised (seen twice in five runs)."""

    def known() -> bool:
        with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
            return all(p.leader is not None for p in admin.partitions(topic))

    wait_until(known, WAIT_S, f"the managers to know every leader of {topic}")


def test_eight_threads_share_one_producer(cluster: Cluster) -> None:
    create_topic(cluster, "shared", PARTITIONS)
    leaders_known(cluster, "shared")
    per_thread = 500
    with AsyncProducer(cluster.lb_url, "shared", api_key=cluster.admin_key) as producer:
        senders = Senders(producer, per_thread)
        senders.start()
        senders.join()
        producer.flush(timeout_s=WAIT_S)
        assert producer.direct_path is not None and producer.direct_path.answers > 0
    futures = [f for messages in senders.sent.values() for _, f in messages]
    assert len(futures) == THREADS * per_thread
    assert all(f.done() and f.exception(0) is None for f in futures)
    stored = read_topic(cluster, "shared")
    assert sum(len(r) for r in stored.values()) == THREADS * per_thread
    assert check_exactly_once_in_order(stored, senders.sent) == THREADS * per_thread


def test_a_partition_leader_killed_mid_send(cluster: Cluster) -> None:
    create_topic(cluster, "killed", PARTITIONS)
    leaders_known(cluster, "killed")
    with AsyncProducer(cluster.lb_url, "killed", api_key=cluster.admin_key) as producer:
        senders = Senders(producer, None)
        senders.start()
        try:
            wait_until(lambda: senders.acknowledged() >= 3_000, WAIT_S, "first acks")
            leader = cluster.broker_name(partition_leader(cluster, "killed", 0))
            at_kill = senders.acknowledged()
            cluster.kill(leader)
            wait_until(
                lambda: senders.acknowledged() >= at_kill + 5_000, WAIT_S, "acks after the kill"
            )
        finally:
            senders.stop.set()
            senders.join()
        producer.flush(timeout_s=WAIT_S)
    futures = [f for messages in senders.sent.values() for _, f in messages]
    assert all(f.done() for f in futures), "every future resolves"
    cluster.up()  # the killed broker back, with its data
    stored = read_topic(cluster, "killed")
    acknowledged = check_exactly_once_in_order(stored, senders.sent)
    assert acknowledged >= at_kill + 5_000
