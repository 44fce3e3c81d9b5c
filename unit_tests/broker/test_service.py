"""BrokerService in-process: produce, pop, fetch and flush through the real group commit,
flusher and service code over the in-memory consensus and store (no processes, no sockets)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.hosted_replica import HostedReplica
from broker.partition.raft import PartitionTwin, partition_definition, partition_twin
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import (
    BrokerId,
    Durability,
    NewMessage,
    PartitionId,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
    StoredMessage,
)
from unit_tests.broker.shared_flush_pool import shared_flush_pool

LIMITS = Limits(flush_period_s=0.01)
WAIT_S = 10.0
P0 = PartitionId(0)


def spec(replicas: int) -> ReplicaSpec:
    addresses = tuple(
        ReplicaAddress(ReplicaId(i), BrokerId(i + 1), f"http://b{i}", f"127.0.0.1:{9000 + i}")
        for i in range(replicas)
    )
    return ReplicaSpec("orders", P0, ReplicaId(0), addresses)


def no_peer(spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
    raise RaftQError(ErrorCode.UNAVAILABLE, "no peers in this test")


@pytest.fixture
def store() -> MemoryMessageStore:
    return MemoryMessageStore()


def make_service(
    store: MemoryMessageStore,
    replicas: int,
    limits: Limits = LIMITS,
    clock_ms: Callable[[], int] = lambda: 1_700_000_000_000,
) -> BrokerService:
    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin(
            f"{s.topic}/{s.partition_id}", len(s.replicas), s.limits or limits.partition_limits()
        )
        return HostedReplica(s, twin, store, limits, no_peer, shared_flush_pool())

    service = BrokerService(store, make_replica, limits, clock_ms)
    service.host(spec(replicas))
    return service


@pytest.fixture
def service(store: MemoryMessageStore) -> Iterator[BrokerService]:
    instance = make_service(store, replicas=1)
    yield instance
    instance.close()


def test_produce_then_fetch_keeps_offsets_keys_and_values_in_place(service: BrokerService) -> None:
    offsets, ack = service.produce(
        "orders",
        P0,
        (NewMessage(value="v0", key="k0"), NewMessage(value="v1", key=None)),
        None,
        None,
    )
    assert offsets == [0, 1]
    assert (ack.durability, ack.raft_index, ack.replicas_synced) == (Durability.FSYNC, 1, 1)
    fetched = service.fetch("orders", P0, 0, 10)
    assert [(m.offset, m.key, m.value) for m in fetched] == [(0, "k0", "v0"), (1, None, "v1")]
    assert service.fetch("orders", P0, 2, 10) == []  # at the end: nothing new yet
    with pytest.raises(RaftQError) as beyond:
        service.fetch("orders", P0, 3, 10)
    assert beyond.value.code is ErrorCode.OFFSET_OUT_OF_RANGE and beyond.value.status == 416
    assert "0 to 2" in beyond.value.message


def test_a_retried_sequence_and_a_retried_pop_return_the_same_answers(
    service: BrokerService,
) -> None:
    batch = (NewMessage(value="a"), NewMessage(value="b"))
    first, _ = service.produce("orders", P0, batch, "p", 1)
    assert service.produce("orders", P0, batch, "p", 1)[0] == first
    popped = service.pop("orders", P0, "c", 1, "r1")
    assert service.pop("orders", P0, "c", 1, "r1") == popped
    assert [m.value for m in service.pop("orders", P0, "c", 5, "r2")] == ["b"]


def test_flushed_messages_leave_memory_and_are_read_from_the_store(
    service: BrokerService, store: MemoryMessageStore
) -> None:
    service.produce("orders", P0, tuple(NewMessage(value=f"m{i}") for i in range(50)), None, None)
    _wait_until(lambda: store.flushed_offsets.get(("orders", 0)) == 50)
    replica = service._replica("orders", P0)
    _wait_until(lambda: replica.partition.read(lambda log: log.evicted_offset) == 50)
    fetched = service.fetch("orders", P0, 10, 5)
    assert [m.value for m in fetched] == [f"m{i}" for i in range(10, 15)]


def test_flushes_are_paced_not_one_per_message(store: MemoryMessageStore) -> None:
    period_s = 0.2
    service = make_service(store, replicas=1, limits=Limits(flush_period_s=period_s))
    try:
        started = time.monotonic()
        for i in range(200):
            service.produce("orders", P0, (NewMessage(value=f"m{i}"),), None, None)
        _wait_until(lambda: store.flushed_offsets.get(("orders", 0)) == 200)
        elapsed_s = time.monotonic() - started
        entries = service._replica("orders", P0).partition.status().commit_index
        # One entry per produce, plus at most one flush mark per period (and one to start).
        assert entries - 200 <= elapsed_s / period_s + 2
    finally:
        service.close()


def test_concurrent_producers_get_distinct_contiguous_offsets(service: BrokerService) -> None:
    def send(i: int) -> list[int]:
        return list(service.produce("orders", P0, (NewMessage(value=str(i)),), f"p{i}", 1)[0])

    with ThreadPoolExecutor(max_workers=8) as pool:
        offsets = sorted(o for found in pool.map(send, range(300)) for o in found)
    assert offsets == list(range(300))


def test_an_unhosted_partition_is_a_clear_404(service: BrokerService) -> None:
    with pytest.raises(RaftQError) as missing:
        service.produce("orders", PartitionId(7), (NewMessage(value="x"),), None, None)
    assert missing.value.code is ErrorCode.UNKNOWN_PARTITION


def test_backpressure_is_answered_and_stores_nothing(store: MemoryMessageStore) -> None:
    service = make_service(store, replicas=3)  # no peer flushes: nothing is ever evicted
    try:
        limit = LIMITS.partition_unflushed_messages_max
        service.produce(
            "orders", P0, tuple(NewMessage(value="x") for _ in range(10_000)), None, None
        )
        with pytest.raises(RaftQError) as full:
            for _ in range(limit // 10_000):
                service.produce(
                    "orders", P0, tuple(NewMessage(value="x") for _ in range(10_000)), None, None
                )
        assert full.value.code is ErrorCode.BACKPRESSURE
        replica = service._replica("orders", P0)
        assert replica.partition.read(lambda log: log.end_offset) == limit
    finally:
        service.close()


def _wait_until(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


def test_a_flushed_produce_answers_once_a_majority_flushed_it(service: BrokerService) -> None:
    batch = (NewMessage(value="a"), NewMessage(value="b"))
    _, ack = service.produce("orders", P0, batch, "p", 1, None, Durability.FLUSHED)
    assert ack.durability is Durability.FLUSHED and ack.replicas_flushed == 1
    _, unsynced = service.produce("orders", P0, batch, "p", 2, None, Durability.REPLICATED)
    assert unsynced.replicas_synced == 0 and unsynced.raft_index > ack.raft_index


def test_a_flushed_produce_that_no_majority_flushes_in_time_says_so(
    store: MemoryMessageStore,
) -> None:
    three = make_service(store, replicas=3, limits=Limits(flushed_ack_wait_s_max=0.05))
    try:
        with pytest.raises(RaftQError) as waited:
            three.produce("orders", P0, (NewMessage(value="x"),), "p", 1, None, Durability.FLUSHED)
        assert waited.value.code is ErrorCode.COMMIT_TIMEOUT
        assert "stored and synced" in waited.value.message
    finally:
        three.close()


def test_replicated_appends_are_flushed_only_after_a_synced_entry(
    service: BrokerService, store: MemoryMessageStore
) -> None:
    replica = service._replica("orders", P0)
    service.produce("orders", P0, (NewMessage(value="r"),), "p", 1, None, Durability.REPLICATED)
    # The flusher proposes a synced entry of its own, then flushes: nothing waits forever.
    _wait_until(lambda: store.flushed_offsets.get(("orders", 0)) == 1)
    assert replica.partition.read(lambda log: log.durable_end_offset) == 1


class BehindTwin(PartitionTwin):
    """A replica that has not applied an entry of its current term yet."""

    behind = True

    def caught_up(self) -> bool:
        return not self.behind


def test_a_replica_behind_its_term_refuses_reads_rather_than_answer_stale(
    store: MemoryMessageStore,
) -> None:
    twins: list[BehindTwin] = []

    def make_replica(s: ReplicaSpec) -> HostedReplica:
        definition = partition_definition(len(s.replicas), LIMITS.partition_limits(), 1)
        twins.append(BehindTwin(definition, "orders/0"))
        return HostedReplica(s, twins[-1], store, LIMITS, no_peer, shared_flush_pool())

    service = BrokerService(store, make_replica, LIMITS, lambda: 1_700_000_000_000)
    service.host(spec(1))
    try:
        service.produce("orders", P0, (NewMessage(value="a"),), None, None)
        with pytest.raises(RaftQError) as refused:
            service.fetch("orders", P0, 0, 10)
        assert refused.value.code is ErrorCode.REFUSED and refused.value.code.proves_nothing_done
        assert service.statuses()[0].caught_up is False
        twins[0].behind = False
        assert [m.value for m in service.fetch("orders", P0, 0, 10)] == ["a"]
    finally:
        service.close()
