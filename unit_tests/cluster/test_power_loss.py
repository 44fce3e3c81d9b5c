"""Power loss of the whole cluster (issue 7, DESIGN §4 "Ack"): with the default level, every
acknowledged message and every consumer offset survives a cut of all nodes at once, and the
replicas agree afterwards.

The cluster's whole directory (cluster.json, the secret, every node's Raft journals and dumps
and SQLite database) is on the power-cut file system with strict directory semantics: a write
survives a cut only once its file was fsynced, a name once its directory was. Each cycle
produces keyed and unkeyed batches through the load balancer (raw HTTP with sequences) and
through ``raftq.Producer`` (direct path), pops part of them with ``raftq.Consumer`` and with
raw HTTP pops carrying request ids, then kill -9s every node and cuts the disk, remounts, and
runs ``raftq cluster up`` on the same directory. Two cuts: one once every replica has flushed
(the messages are then in the databases, no longer in memory), one right after a burst of
acknowledgements and pops (they are then only in the Raft journals).

After each cut: every acknowledged message at its offset with its key (``checker.py``: no
loss, duplicate or phantom), replicas and their databases equal (``/checksum``), a retried pop
gets its range again, a retried batch its offsets again (sequences still de-duplicate), and
the consumers' next pops continue right after what they had popped. The long version, with
cuts at random moments and after log compactions, is ``python -m stress_tests.power_loss``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from raftq import Consumer, Producer
from stress_tests.checker import check, reference_logs
from stress_tests.final_read import final_read, wait_converged
from stress_tests.history import Entry, Outcome, Position, Read, Recorder, Send
from stress_tests.polling import poll_until
from stress_tests.power_switch import CLUSTER_DIR_NAME, cut_power, stop_everything
from stress_tests.powercut import PowerCutFS, fuse_unavailable_reason
from unit_tests.cluster.client_ops import (
    checksums,
    create_topic,
    pop,
    post_when_ready,
    produce,
    read_replica,
    register_producer,
)
from unit_tests.cluster.harness import Cluster
from unit_tests.ports import CLUSTER_BASE_PORTS
from unit_tests.stress.prerequisites import require

FUSE_UNAVAILABLE = fuse_unavailable_reason()
pytestmark = pytest.mark.cluster

BASE_PORT = CLUSTER_BASE_PORTS["power_loss"]
"""20600..20999: clear of the other cluster tests' blocks (the fast tier ends at 20499)."""
TOPIC = "power"
PARTITIONS = 3
BATCH_MESSAGES = 40
BURST_THREADS = 4
BURST_BATCHES = 3
KEYS = 5
BURST_JOIN_S = 120.0


@dataclass
class Ledger:
    """What the clients were told: acknowledged batches (with their keys) and popped
    messages, as the checker's history."""

    recorder: Recorder = field(default_factory=Recorder)
    keys: dict[str, str | None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(
        self,
        producer: str,
        sequence: int,
        messages: list[tuple[str | None, str]],
        positions: list[Position],
    ) -> None:
        values = tuple(value for _, value in messages)
        with self._lock:
            self.keys.update((value, key) for key, value in messages)
        self.recorder.send(Send(producer, sequence, values, Outcome.ACKED, tuple(positions)))

    def popped(self, consumer: str, messages: list[tuple[int, int, str]]) -> None:
        """(partition id, offset, value) per popped message."""
        self.recorder.reads([Read(consumer, p, o, v) for p, o, v in messages])


@dataclass
class PoweredCluster:
    disk: PowerCutFS
    cluster: Cluster
    logs_dir: Path
    cuts: int = 0

    def cut_and_restore(self) -> None:
        """Cut power to every node and the disk at once, then power on and ``cluster up``."""
        self.cuts += 1
        cut_power(self.cluster.local, self.disk, self.logs_dir / f"before-cut-{self.cuts}")
        self.disk.mount()
        self.cluster.up()


@pytest.fixture(scope="module", autouse=True)
def fuse() -> None:
    """The proof needs FUSE: without it these tests fail, saying why (``prerequisites``).
    Module-scoped and autouse, so it runs before ``powered`` tries to mount."""
    require(FUSE_UNAVAILABLE)


@pytest.fixture(scope="module")
def powered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoweredCluster]:
    backing = tmp_path_factory.mktemp("power-cut-disk")
    disk = PowerCutFS(backing, strict_directories=True)
    directory = disk.mount() / CLUSTER_DIR_NAME
    cluster = Cluster(directory, BASE_PORT)
    try:
        cluster.up()
        yield PoweredCluster(disk, cluster, backing / "node-logs")
    finally:
        cluster.http.close()
        cluster.internal.close()
        stop_everything(directory, disk)


class Clients:
    """The test's producers and consumers; every answer goes into the ledger."""

    def __init__(self, cluster: Cluster, ledger: Ledger) -> None:
        self.cluster, self.ledger = cluster, ledger
        self.http_producer = _register(cluster, "producer")
        self.http_sequence = 0
        self.last_http_batch: tuple[int, list[tuple[str | None, str]], list[Position]] | None = None
        self.producer = Producer(
            cluster.lb_url, TOPIC, producer_id="lib-producer", api_key=cluster.admin_key
        )
        self.producer_sequence = 0  # the Producer numbers its batches from 0, one per call
        self.consumer = Consumer(cluster.lb_url, TOPIC, api_key=cluster.admin_key)
        self.http_consumer = _register(cluster, "consumer")
        self.probe_producer = _register(cluster, "producer")
        self.probe_sequence = 0
        self.pops = 0
        self.last_http_pop: tuple[str, list[dict[str, Any]]] | None = None
        self._counter = 0

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()

    def messages(self, tag: str, keyed: bool) -> list[tuple[str | None, str]]:
        start, self._counter = self._counter, self._counter + BATCH_MESSAGES
        return [
            (f"k{i % KEYS}" if keyed else None, f"{tag}/{i}") for i in range(start, self._counter)
        ]

    def produce_via_lb(self, keyed: bool) -> None:
        """One batch through the load balancer (raw HTTP), retried with its sequence."""
        batch = self.messages("lb", keyed)
        self.http_sequence += 1
        acks = produce(self.cluster, self.http_producer, self.http_sequence, batch, topic=TOPIC)
        positions = [Position(a.partition_id, a.offset) for a in acks]
        self.ledger.acked(self.http_producer, self.http_sequence, batch, positions)
        self.last_http_batch = (self.http_sequence, batch, positions)

    def produce_with_library(self, keyed: bool) -> None:
        """One batch through ``raftq.Producer`` (direct path to the partition leaders)."""
        batch = self.messages("lib", keyed)
        offsets = self.producer.produce_batch((value, key) for key, value in batch)
        positions = [Position(o.partition_id, o.offset) for o in offsets]
        self.ledger.acked("lib-producer", self.producer_sequence, batch, positions)
        self.producer_sequence += 1

    def pop_with_library(self, max_messages: int) -> int:
        records = self.consumer.poll(max_messages)
        self.ledger.popped(
            self.consumer.consumer_id, [(r.partition_id, r.offset, r.value) for r in records]
        )
        return len(records)

    def pop_via_lb(self, max_messages: int) -> int:
        """A raw pop with a request id (retried with it until answered)."""
        self.pops += 1
        request_id = f"pop-{self.pops}"
        messages = pop(self.cluster, self.http_consumer, max_messages, request_id)
        self.ledger.popped(self.http_consumer, _triples(messages))
        self.last_http_pop = (request_id, messages)
        return len(messages)

    def write_to_every_partition(self) -> None:
        """One message to each partition, acknowledged: once it is, the partition's new
        leader has committed an entry of its term, so everything before it is committed and
        applied too. Until then every replica serves its state as of its last stored commit
        index (after a restart of all of them: possibly none of the acknowledged messages)."""
        for partition_id in range(PARTITIONS):
            batch: list[tuple[str | None, str]] = [(None, f"probe/{self.probe_sequence}")]
            self.probe_sequence += 1
            acks = produce(
                self.cluster,
                self.probe_producer,
                self.probe_sequence,
                batch,
                topic=TOPIC,
                partition_id=partition_id,
            )
            positions = [Position(a.partition_id, a.offset) for a in acks]
            self.ledger.acked(self.probe_producer, self.probe_sequence, batch, positions)

    def round(self) -> None:
        """Keyed and unkeyed batches on both paths, and part of them popped by both."""
        for keyed in (True, False):
            self.produce_via_lb(keyed)
            self.produce_with_library(keyed)
        self.pop_with_library(BATCH_MESSAGES)
        self.pop_via_lb(BATCH_MESSAGES)


def test_every_ack_and_consumer_offset_survives_power_cuts(powered: PoweredCluster) -> None:
    cluster = powered.cluster
    create_topic(cluster, TOPIC, PARTITIONS)
    ledger = Ledger()
    clients = Clients(cluster, ledger)
    try:
        # Cut 1: everything flushed, so read back from the databases after the cut.
        clients.round()
        clients.round()
        for partition_id in range(PARTITIONS):
            assert wait_converged(cluster.local, cluster.internal, TOPIC, partition_id) is not None
        powered.cut_and_restore()
        check_first_reads_are_not_stale(cluster, ledger)
        clients.write_to_every_partition()
        check_after_cut(cluster, clients, ledger)

        # Cut 2: right after a burst of acknowledgements and pops (only in the journals).
        clients.round()
        burst(cluster, ledger)
        clients.pop_with_library(BATCH_MESSAGES)
        clients.pop_via_lb(BATCH_MESSAGES)
        powered.cut_and_restore()
        check_first_reads_are_not_stale(cluster, ledger)
        clients.write_to_every_partition()
        check_after_cut(cluster, clients, ledger)

        # After both cuts: both consumers go on to the end without a gap or a repeat.
        clients.round()
        drain(clients)
        stored = check_everything(cluster, ledger)
        for consumer in (clients.consumer.consumer_id, clients.http_consumer):
            seen = sorted(
                r.value for r in ledger.recorder.snapshot().reads if r.consumer == consumer
            )
            assert seen == sorted(stored), f"{consumer} did not pop every message exactly once"
    finally:
        clients.close()


def burst(cluster: Cluster, ledger: Ledger) -> None:
    """Producers on both paths at once, each sending a few batches as fast as they are
    acknowledged (the test cuts power as soon as the last one is)."""
    errors: list[BaseException] = []

    def one_producer(index: int) -> None:
        try:
            if index % 2 == 0:
                _burst_with_library(cluster, ledger, f"burst-{index}")
            else:
                _burst_via_lb(cluster, ledger, f"burst-{index}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_producer, args=(i,)) for i in range(BURST_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BURST_JOIN_S)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads), "a burst producer hung"


def _burst_batch(name: str, number: int) -> list[tuple[str | None, str]]:
    keyed = number % 2 == 0
    return [
        (f"k{i % KEYS}" if keyed else None, f"{name}/{number}/{i}") for i in range(BATCH_MESSAGES)
    ]


def _burst_with_library(cluster: Cluster, ledger: Ledger, name: str) -> None:
    with Producer(cluster.lb_url, TOPIC, producer_id=name, api_key=cluster.admin_key) as producer:
        for number in range(BURST_BATCHES):
            batch = _burst_batch(name, number)
            offsets = producer.produce_batch((value, key) for key, value in batch)
            ledger.acked(name, number, batch, [Position(o.partition_id, o.offset) for o in offsets])


def _burst_via_lb(cluster: Cluster, ledger: Ledger, name: str) -> None:
    producer_id = _register(cluster, "producer")
    for number in range(BURST_BATCHES):
        batch = _burst_batch(name, number)
        acks = produce(cluster, producer_id, number, batch, topic=TOPIC)
        ledger.acked(producer_id, number, batch, [Position(a.partition_id, a.offset) for a in acks])


def check_first_reads_are_not_stale(cluster: Cluster, ledger: Ledger) -> None:
    """Right after ``cluster up``, before anything is written: a fetch either waits (503,
    retried by the client) or returns every acknowledged message. (Before replicas refused
    reads until they had applied an entry of their term, fetches came back empty for about
    0.5 s after a restart of every node: all replicas agreed on a stale state.)"""
    acked_ends: dict[int, int] = {}
    for send in ledger.recorder.snapshot().sends:
        for position in send.positions:
            end = acked_ends.get(position.partition_id, 0)
            acked_ends[position.partition_id] = max(end, position.offset + 1)
    with Consumer(
        cluster.lb_url, TOPIC, consumer_id="stale-read-probe", api_key=cluster.admin_key
    ) as reader:
        for partition_id, end in acked_ends.items():
            offsets = [r.offset for r in reader.fetch(TOPIC, partition_id, 0, end)]
            assert offsets == list(range(end)), f"partition {partition_id}: stale read {offsets}"


def check_after_cut(cluster: Cluster, clients: Clients, ledger: Ledger) -> None:
    check_everything(cluster, ledger)
    # A pop retried with its request id gets its range back, not the next one.
    assert clients.last_http_pop is not None
    request_id, before = clients.last_http_pop
    again = pop(cluster, clients.http_consumer, BATCH_MESSAGES, request_id)
    assert _triples(again) == _triples(before), f"pop {request_id} retried after the cut"
    # A batch retried with its sequence is recognised: its offsets, nothing stored twice.
    assert clients.last_http_batch is not None
    sequence, batch, positions = clients.last_http_batch
    acks = produce(cluster, clients.http_producer, sequence, batch, topic=TOPIC)
    assert [Position(a.partition_id, a.offset) for a in acks] == positions
    with Producer(
        cluster.lb_url,
        TOPIC,
        producer_id="lib-producer",
        first_sequence=clients.producer_sequence - 1,
        api_key=cluster.admin_key,
    ) as replay:
        history = ledger.recorder.snapshot()
        last = max(
            (s for s in history.sends if s.producer == "lib-producer"), key=lambda s: s.sequence
        )
        batch_again = [(ledger.keys[value], value) for value in last.values]
        offsets = replay.produce_batch((value, key) for key, value in batch_again)
        assert tuple(Position(o.partition_id, o.offset) for o in offsets) == last.positions
    check_everything(cluster, ledger)  # the retries stored nothing twice


def check_everything(cluster: Cluster, ledger: Ledger) -> list[str]:
    """Every replica read once it has flushed; the checker's verdict, keys, and the replicas'
    database checksums compared. Returns every stored value."""
    final, converged = final_read(cluster.local, TOPIC, PARTITIONS)
    assert converged, "the replicas did not reach the same end offset and flush it"
    verdict = check(ledger.recorder.snapshot(), final)
    assert verdict.ok, "\n".join(verdict.lines())
    for replica in final.replicas:
        for entry in replica.entries:
            assert entry.key == ledger.keys[entry.value], f"{entry} was produced with another key"
    logs = reference_logs(final.replicas)
    for partition_id in range(PARTITIONS):
        end = len(logs[partition_id])
        sums = checksums(cluster, TOPIC, partition_id, end)
        assert len({(count, digest) for count, digest, _ in sums.values()}) == 1, sums
        assert all(count == end for count, _, _ in sums.values()), sums
    return [entry.value for entries in logs.values() for entry in entries]


def drain(clients: Clients) -> None:
    """Both consumers pop until they get nothing."""
    for pop_once in (clients.pop_with_library, clients.pop_via_lb):
        for _ in range(1_000):
            if pop_once(500) == 0:
                break


def _register(cluster: Cluster, kind: str) -> str:
    response = post_when_ready(cluster, f"/{kind}s", {"topic": TOPIC})
    assert response.status_code == 201, response.text
    return str(response.json()[f"{kind}_id"])


def _triples(messages: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    return [(m["partition_id"], m["offset"], m["message"]) for m in messages]


LOOSE_TOPIC = "power-replicated"
LOOSE_BATCHES = 30


def test_what_replicated_acks_can_lose(powered: PoweredCluster) -> None:
    """``replicated`` acknowledges before any disk sync, so a cut of every node can lose
    what was acknowledged since the partition's last synced entry: this shows how much, and
    that nothing else breaks. Every ``fsync`` ack survives, what survives of the
    ``replicated`` ones is a prefix of them (nothing is lost in the middle), nothing
    unacknowledged appears, and all replicas agree. The count lost is printed (pytest -s):
    the flusher syncs at least every ``flush_period_s`` while ``replicated`` appends wait,
    so it is bounded by what one partition acknowledges in that time."""
    cluster = powered.cluster
    create_topic(cluster, LOOSE_TOPIC)
    synced_producer = register_producer(cluster, LOOSE_TOPIC)
    loose_producer = register_producer(cluster, LOOSE_TOPIC)
    synced = [
        produce(cluster, synced_producer, n, [(None, f"fsync-{n}")], topic=LOOSE_TOPIC)[0]
        for n in range(1, 4)
    ]
    loose = [
        produce(
            cluster,
            loose_producer,
            n,
            [(None, f"replicated-{n}")],
            topic=LOOSE_TOPIC,
            durability="replicated",
        )[0]
        for n in range(1, LOOSE_BATCHES + 1)
    ]
    powered.cut_and_restore()
    produce(cluster, synced_producer, 4, [(None, "after")], topic=LOOSE_TOPIC)

    stored = {(a.offset, a.value) for a in _read_agreed(cluster)}
    assert all((a.offset, a.value) in stored for a in synced), "an fsync ack was lost"
    kept = [a for a in loose if (a.offset, a.value) in stored]
    assert kept == loose[: len(kept)], "replicated acks were lost in the middle"
    acked = {(a.offset, a.value) for a in synced + loose}
    assert all(v == "after" or (o, v) in acked for o, v in stored), "an unacked message"
    print(f"replicated: {len(loose) - len(kept)} of {len(loose)} acks lost at the cut")


def _read_agreed(cluster: Cluster) -> list[Entry]:
    """The partition as every replica serves it, once all three agree."""

    def agreed() -> list[Entry] | None:
        try:
            reads = [read_replica(cluster, b, LOOSE_TOPIC, 0) for b in (1, 2, 3)]
        except requests.HTTPError as exc:
            # 503 REFUSED: a replica not caught up since the restart (it has not applied an
            # entry of its term yet) refuses to read; ask again (CI, on a loaded machine).
            if exc.response is not None and exc.response.status_code == 503:
                return None
            raise
        return reads[0] if reads[0] == reads[1] == reads[2] else None

    return poll_until(agreed, 60.0, "the replicas of the replicated-acks topic to agree")
