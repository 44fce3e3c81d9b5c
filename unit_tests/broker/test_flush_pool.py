"""The broker's flush pool (issue 22: a fixed number of flush threads, not one per replica):
round-robin between replicas that have work, one round of a replica at a time, the pause a
round asks for, removal and closing, a failing replica beside working ones; and
``Flusher.run_round``'s pauses, which the pool honours. In process, with stand-in rounds
(and the in-memory twin for the flusher); every wait is for a condition, with a bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from broker.hosted_replica import HostedReplica
from broker.partition.raft import partition_twin
from broker.partition.replica import PartitionReplica
from broker.persistence.flush_pool import FlushPool
from broker.persistence.flusher import Flusher
from broker.persistence.store import FlushBatch, MemoryMessageStore
from broker.service import BrokerService
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, LimitsError
from protocol.types import (
    BrokerId,
    PartitionId,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
    StoredMessage,
)
from unit_tests.runtime.replication.waits import wait_for

WAIT_S = 10.0


def _block_on(release: threading.Event) -> None:
    assert release.wait(WAIT_S), "the test never released the round"


class FakeRound:
    """A replica's rounds as the pool sees them: records when each ran and on which thread,
    how many of its rounds ran at once, and returns ``pause_s`` (or runs ``body``)."""

    def __init__(
        self, name: str, pause_s: float = 0.0, body: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self.pause_s = pause_s
        self.body = body
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def run_round(self) -> float:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.starts.append(time.monotonic())
        try:
            if self.body is not None:
                self.body()
            return self.pause_s
        finally:
            with self._lock:
                self.running -= 1
                self.ends.append(time.monotonic())

    @property
    def rounds(self) -> int:
        return len(self.starts)


class Recorder:
    """The order in which rounds of several replicas started (one thread: a total order)."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def round(self, name: str, pause_s: float = 0.0) -> FakeRound:
        fake = FakeRound(name, pause_s)
        fake.body = lambda: self.order.append(name)
        return fake


@pytest.fixture
def pools() -> Iterator[Callable[..., FlushPool]]:
    made: list[FlushPool] = []

    def make(threads: int = 2, error_pause_s: float = 0.05, start: bool = True) -> FlushPool:
        pool = FlushPool(threads, error_pause_s, name="test pool")
        if start:
            pool.start()
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.close()
        assert pool.join(WAIT_S), "a flush pool thread did not end"


def test_busy_replicas_take_turns_round_robin(pools: Callable[..., FlushPool]) -> None:
    """Every replica always has a full batch (pause 0): on one thread they run in turn,
    A B C A B C ..., none twice before the others had their round."""
    pool = pools(threads=1, start=False)
    recorder = Recorder()
    rounds = [recorder.round(name) for name in "ABC"]
    for fake in rounds:
        pool.add(fake)
    pool.start()
    wait_for(lambda: len(recorder.order) >= 30, "30 rounds")
    for fake in rounds:
        pool.remove(fake).wait(WAIT_S)
    first = recorder.order[:30]
    assert first == list("ABC") * 10


def test_a_busy_replica_does_not_starve_one_whose_pause_ended(
    pools: Callable[..., FlushPool],
) -> None:
    """A replica with a full batch every round and one that pauses 20 ms: the paused one
    runs again soon after its pause, between the busy one's rounds."""
    pool = pools(threads=1)
    busy = FakeRound("busy", pause_s=0.0)
    paced = FakeRound("paced", pause_s=0.02)
    pool.add(busy)
    pool.add(paced)
    wait_for(lambda: paced.rounds >= 5, "five rounds of the paced replica")
    pool.remove(busy).wait(WAIT_S)
    pool.remove(paced).wait(WAIT_S)
    assert busy.rounds > paced.rounds
    for ended, started in zip(paced.ends, paced.starts[1:], strict=False):
        assert started - ended >= 0.02  # its pause, even with the busy one always due


def test_a_round_pauses_as_long_as_it_asks_and_no_thread_waits_for_it(
    pools: Callable[..., FlushPool],
) -> None:
    """One thread, two replicas pausing 50 ms each: both keep their pace (a pause holds no
    thread, so the other replica's rounds are not delayed by it)."""
    pool = pools(threads=1)
    slow = [FakeRound(f"r{i}", pause_s=0.05) for i in range(2)]
    for fake in slow:
        pool.add(fake)
    wait_for(lambda: all(f.rounds >= 4 for f in slow), "four rounds of each")
    for fake in slow:
        pool.remove(fake).wait(WAIT_S)
        gaps = [s - e for e, s in zip(fake.ends, fake.starts[1:], strict=False)]
        assert min(gaps) >= 0.05
    # the two pauses overlapped: both replicas' rounds interleave on the one thread
    assert slow[0].starts[1] < slow[1].starts[2] and slow[1].starts[1] < slow[0].starts[2]


def test_one_replica_never_has_two_rounds_at_once(pools: Callable[..., FlushPool]) -> None:
    """Four threads; replica A's round blocks while B (always due) runs hundreds of rounds
    on the others: A's next round waits for its first to end."""
    pool = pools(threads=4)
    release = threading.Event()
    blocked = FakeRound("A", pause_s=0.0, body=lambda: _block_on(release))
    other = FakeRound("B", pause_s=0.0)
    pool.add(blocked)
    wait_for(lambda: blocked.running == 1, "A's round to start")
    pool.add(other)
    wait_for(lambda: other.rounds >= 300, "300 rounds of B")
    assert blocked.rounds == 1
    release.set()
    wait_for(lambda: blocked.rounds >= 20, "A's next rounds")
    pool.remove(blocked).wait(WAIT_S)
    pool.remove(other).wait(WAIT_S)
    assert blocked.most_at_once == 1
    assert other.most_at_once == 1


def test_a_removed_replica_runs_no_round_again(pools: Callable[..., FlushPool]) -> None:
    pool = pools(threads=2)
    gone = FakeRound("gone", pause_s=0.0)
    stays = FakeRound("stays", pause_s=0.0)
    pool.add(gone)
    pool.add(stays)
    wait_for(lambda: gone.rounds >= 10, "rounds of the replica to remove")
    assert pool.remove(gone).wait(WAIT_S)
    after = gone.rounds
    seen = stays.rounds
    wait_for(lambda: stays.rounds >= seen + 100, "100 more rounds of the other replica")
    assert gone.rounds == after
    assert gone.running == 0
    assert pool.remove(gone).wait(0.0)  # removing twice is harmless


def test_removal_waits_for_the_round_already_running(pools: Callable[..., FlushPool]) -> None:
    pool = pools(threads=2)
    release = threading.Event()
    fake = FakeRound("dropped", body=lambda: _block_on(release))
    pool.add(fake)
    wait_for(lambda: fake.running == 1, "its round to start")
    removed = pool.remove(fake)
    assert not removed.wait(0.01)  # the round still runs: bounded, it says so
    release.set()
    assert removed.wait(WAIT_S)
    assert fake.running == 0
    assert fake.rounds == 1


def test_a_failing_replica_does_not_stop_the_others(pools: Callable[..., FlushPool]) -> None:
    """A round that raises is logged and retried after the error pause; the thread lives
    on and serves the other replica."""
    pool = pools(threads=1, error_pause_s=0.01)

    def fail() -> None:
        raise RuntimeError("this replica's round is broken")

    broken = FakeRound("broken", body=fail)
    healthy = FakeRound("healthy", pause_s=0.0)
    pool.add(broken)
    pool.add(healthy)
    wait_for(lambda: broken.rounds >= 3 and healthy.rounds >= 100, "both replicas' rounds")
    for ended, started in zip(broken.ends, broken.starts[1:], strict=False):
        assert started - ended >= 0.01
    pool.remove(broken).wait(WAIT_S)
    pool.remove(healthy).wait(WAIT_S)


def test_closing_ends_every_thread_and_every_round(pools: Callable[..., FlushPool]) -> None:
    pool = pools(threads=3)
    fakes = [FakeRound(f"r{i}", pause_s=0.001) for i in range(10)]
    for fake in fakes:
        pool.add(fake)
    wait_for(lambda: all(f.rounds >= 2 for f in fakes), "rounds of every replica")
    pool.close()
    assert pool.join(WAIT_S)
    counts = [f.rounds for f in fakes]
    assert all(f.running == 0 for f in fakes)
    with pytest.raises(RuntimeError):
        pool.add(FakeRound("late"))
    assert [f.rounds for f in fakes] == counts


def test_a_replica_is_added_once() -> None:
    pool = FlushPool(1, 0.05)  # not started: adding needs no thread
    fake = FakeRound("once")
    pool.add(fake)
    with pytest.raises(ValueError):
        pool.add(fake)
    with pytest.raises(ValueError):
        FlushPool(0, 0.05)


def test_flush_threads_is_a_limit_checked_at_start() -> None:
    assert Limits().flush_threads == 4
    assert Limits().with_overrides({"flush_threads": "3"}).flush_threads == 3
    with pytest.raises(LimitsError):
        Limits(flush_threads=0).validate()


# --- Flusher.run_round: the pauses the pool honours ----------------------------------------


def _spec(replicas: int = 1) -> ReplicaSpec:
    addresses = tuple(
        ReplicaAddress(ReplicaId(i), BrokerId(i + 1), f"http://b{i}", f"127.0.0.1:{9300 + i}")
        for i in range(replicas)
    )
    return ReplicaSpec("orders", PartitionId(0), ReplicaId(0), addresses)


def _no_peer(spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
    raise RaftQError(ErrorCode.UNAVAILABLE, "no peers in this test")


class FlakyStore(MemoryMessageStore):
    """Refuses inserts while ``down``."""

    down = False

    def insert_messages(
        self, topic: str, partition_id: int, batch: FlushBatch, flushed_offset: int
    ) -> None:
        if self.down:
            raise RaftQError(ErrorCode.UNAVAILABLE, "the database is away in this test")
        super().insert_messages(topic, partition_id, batch, flushed_offset)


def test_run_round_pauses_after_a_round_that_was_not_full_and_backs_off_on_failures() -> None:
    limits = Limits(flush_batch_messages_max=2, flush_period_s=0.1, flush_retry_backoff_s_max=0.35)
    twin = partition_twin("orders/0", 1, limits.partition_limits())
    replica = PartitionReplica(_spec(), twin, limits)
    store = FlakyStore()
    flusher = Flusher(replica, store, limits, _no_peer)
    replica.append([(None, str(i)) for i in range(3)], 1_000, None, None)
    assert flusher.run_round() == 0.0  # a full batch: more may wait, no pause
    assert flusher.run_round() == 0.1  # one message: not full
    assert flusher.run_round() == 0.1  # nothing
    replica.append([(None, "x")], 1_001, None, None)
    store.down = True
    assert [flusher.run_round() for _ in range(4)] == [0.2, 0.35, 0.35, 0.35]
    store.down = False
    assert flusher.run_round() == 0.1  # recovered: the backoff starts over
    assert replica.read(lambda log: log.flushed_offsets[0]) == 4


def test_a_broker_flushes_every_replica_on_the_pool_s_threads_alone() -> None:
    """Twenty replicas hosted: no thread per replica, and every one flushes."""
    limits = Limits(flush_period_s=0.01)
    pool = FlushPool(limits.flush_threads, limits.flush_retry_backoff_s_max, name="one broker")
    pool.start()
    store = MemoryMessageStore()

    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin(f"{s.topic}/{s.partition_id}", 1, limits.partition_limits())
        return HostedReplica(s, twin, store, limits, _no_peer, pool)

    service = BrokerService(store, make_replica, limits, lambda: 1_000)
    before = threading.active_count()
    try:
        topics = [f"t{i}" for i in range(20)]
        for topic in topics:
            service.host(ReplicaSpec(topic, PartitionId(0), ReplicaId(0), _spec().replicas))
        assert threading.active_count() - before < 5
        for topic in topics:
            replica = service._replica(topic, PartitionId(0))
            replica.partition.append([(None, "m")], 1_000, None, None)
        wait_for(
            lambda: all(store.flushed_offsets.get((t, 0)) == 1 for t in topics),
            "every replica's flush",
        )
    finally:
        service.close()
        pool.close()
        assert pool.join(WAIT_S)


class HeldStore(MemoryMessageStore):
    """Holds every insert until ``release`` (after saying so with ``entered``)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def insert_messages(
        self, topic: str, partition_id: int, batch: FlushBatch, flushed_offset: int
    ) -> None:
        self.entered.set()
        assert self.release.wait(WAIT_S), "the test never released the insert"
        super().insert_messages(topic, partition_id, batch, flushed_offset)


def test_a_dropped_replica_s_rows_go_after_its_running_round_ends() -> None:
    """The drop deletes the partition's rows only once the round that was inserting them
    has ended: none are left behind."""
    limits = Limits(flush_period_s=0.01)
    pool = FlushPool(2, 0.05, name="dropping broker")
    pool.start()
    store = HeldStore()

    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin("orders/0", 1, limits.partition_limits())
        return HostedReplica(s, twin, store, limits, _no_peer, pool)

    service = BrokerService(store, make_replica, limits, lambda: 1_000)
    spec = _spec()
    try:
        service.host(spec)
        service._replica("orders", PartitionId(0)).partition.append(
            [(None, "m")], 1_000, None, None
        )
        assert store.entered.wait(WAIT_S), "the flush round never inserted"
        dropping = threading.Thread(
            target=service.drop, args=("orders", PartitionId(0), spec.raft_address)
        )
        dropping.start()
        dropping.join(0.05)
        assert dropping.is_alive()  # waits for the round (within raft_commit_timeout_s)
        store.release.set()
        dropping.join(WAIT_S)
        assert not dropping.is_alive()
        assert store.read_messages("orders", 0, 0, 10) == []
    finally:
        store.release.set()
        service.close()
        pool.close()
        assert pool.join(WAIT_S)
