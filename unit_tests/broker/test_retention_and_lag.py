"""Retention (issue 10): the log start moves past old messages, by age and by size, never
past what every in-sync replica has flushed; the rows leave the database; a fetch below the
log start is refused naming the valid range; consumers continue from the log start."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from broker.hosted_replica import HostedReplica
from broker.partition.commands import Truncate, from_wire, to_wire
from broker.partition.log import PartitionLog, Truncated
from broker.partition.raft import partition_twin
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, PartitionLimits
from protocol.types import (
    BrokerId,
    NewMessage,
    Offset,
    PartitionId,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
    StoredMessage,
)
from unit_tests.broker.shared_flush_pool import shared_flush_pool

WAIT_S = 10.0
LIMITS = Limits(flush_period_s=0.01, retention_check_period_s=0.01)
P0 = PartitionId(0)
PRODUCED_MS = 1_700_000_000_000
"""The service's clock: every message is stamped with it (long ago)."""


def test_truncate_moves_the_log_start_forward_only_and_never_past_the_evicted_offset() -> None:
    # Replica 2 lags beyond replica_lag_messages_max: the other two decide what leaves memory.
    log = PartitionLog(3, replace(Limits().partition_limits(), replica_lag_messages_max=2))
    log.append([(None, f"v{i}") for i in range(10)], 1, None, None)
    assert log.truncate(5) == Truncated(Offset(0))  # nothing flushed: nothing may leave
    for replica in (0, 1):
        log.mark_flushed(ReplicaId(replica), 6)
    assert log.evicted_offset == 6
    assert log.truncate(9) == Truncated(Offset(6))
    assert log.truncate(2) == Truncated(Offset(6))  # never back
    consumed = log.consume("late", 100, None, 2)
    assert (consumed.start, consumed.end) == (6, 10)  # type: ignore[union-attr]


def test_truncate_travels_as_a_plain_tuple() -> None:
    assert to_wire(Truncate(Offset(7))) == ("truncate", 7)
    assert from_wire(("truncate", 7)) == Truncate(Offset(7))
    for bad in (("truncate",), ("truncate", "7"), ("truncate", True), ("truncate", 1, 2)):
        assert from_wire(bad) is None


def test_partition_limits_from_before_retention_load_without_it() -> None:
    limits = Limits().partition_limits()
    old = {k: v for k, v in limits.to_json().items() if not k.startswith("retention")}
    assert PartitionLimits.from_json(old) == limits
    with pytest.raises(ValueError, match="retention_ms"):
        PartitionLimits.from_json({**limits.to_json(), "retention_ms": -1})


def _spec(retention: PartitionLimits) -> ReplicaSpec:
    address = ReplicaAddress(ReplicaId(0), BrokerId(1), "http://b", "127.0.0.1:1")
    return ReplicaSpec("orders", P0, ReplicaId(0), (address,), retention)


def _service(
    store: MemoryMessageStore, retention: PartitionLimits, clock_ms: Callable[[], int] | None = None
) -> BrokerService:
    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin(f"{s.topic}/{s.partition_id}", 1, s.limits or retention)
        return HostedReplica(s, twin, store, LIMITS, _no_peer, shared_flush_pool())

    service = BrokerService(store, make_replica, LIMITS, clock_ms or (lambda: PRODUCED_MS))
    service.host(_spec(retention))
    return service


def _no_peer(spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
    raise RaftQError(ErrorCode.UNAVAILABLE, "no peers in this test")


@pytest.fixture
def store() -> MemoryMessageStore:
    return MemoryMessageStore()


@pytest.fixture
def by_size(store: MemoryMessageStore) -> Iterator[BrokerService]:
    retention = replace(Limits().partition_limits(), retention_bytes=100)
    service = _service(store, retention)
    yield service
    service.close()


def _log_start(service: BrokerService) -> int:
    (status,) = service.statuses()
    return status.log_start_offset


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_retention_by_size_keeps_the_newest_messages_within_the_bound(
    by_size: BrokerService, store: MemoryMessageStore
) -> None:
    values = [NewMessage(value=f"{i:010d}") for i in range(50)]  # 10 characters each
    by_size.produce("orders", P0, tuple(values), None, None)
    _wait(lambda: _log_start(by_size) == 40, "the log start to reach 40 (10 x 10 bytes kept)")
    # ... and the rows below it leave the database (the flusher's next round).
    _wait(lambda: len(store.read_messages("orders", 0, 0, 50)) == 10, "the rows to leave")
    kept = store.read_messages("orders", 0, 0, 50)
    assert [m.offset for m in kept] == list(range(40, 50))
    with pytest.raises(RaftQError) as refused:
        by_size.fetch("orders", P0, 39, 5)
    assert refused.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert "valid offsets are 40 to 50" in str(refused.value)
    assert [m.offset for m in by_size.fetch("orders", P0, 40, 100)] == list(range(40, 50))
    popped = by_size.pop("orders", P0, "new-consumer", 100, None)
    assert [m.offset for m in popped] == list(range(40, 50))


class CountingStore(MemoryMessageStore):
    """Records the end of each retention query, to know when one ran over the rows."""

    def __init__(self) -> None:
        super().__init__()
        self.retention_ends: list[int] = []

    def retention_start(
        self, topic: str, partition_id: int, end: int, cutoff_ms: int | None, bytes_max: int | None
    ) -> int:
        self.retention_ends.append(end)
        return super().retention_start(topic, partition_id, end, cutoff_ms, bytes_max)


def test_retention_by_age_goes_by_partition_time_not_the_leaders_clock() -> None:
    """G12: the messages were stamped by proposers long ago (PRODUCED_MS) and this broker's
    wall clock is years later; only partition time (the proposers' stamps, here the next
    pop's) ages them."""
    store = CountingStore()
    now_ms = [PRODUCED_MS]
    retention = replace(Limits().partition_limits(), retention_ms=60_000)
    service = _service(store, retention, lambda: now_ms[0])
    try:
        service.produce("orders", P0, (NewMessage(value="old"),) * 20, None, None)
        _wait(lambda: 20 in store.retention_ends, "a retention query over the flushed rows")
        assert _log_start(service) == 0, "young in partition time: kept"
        now_ms[0] = PRODUCED_MS + 61_000
        assert service.pop("orders", P0, "c", 1, "r1") != []  # moves partition time on
        _wait(lambda: _log_start(service) == 20, "every message to leave")
        _wait(lambda: not store.read_messages("orders", 0, 0, 20), "the rows to leave")
        assert service.fetch("orders", P0, 20, 10) == []  # the end: nothing to read yet
    finally:
        service.close()


def test_no_retention_keeps_everything(store: MemoryMessageStore) -> None:
    service = _service(store, Limits().partition_limits())
    try:
        service.produce("orders", P0, (NewMessage(value="kept"),) * 20, None, None)
        _wait(lambda: service.statuses()[0].flushed_offsets == [20], "the flush")
        assert _log_start(service) == 0 and len(store.read_messages("orders", 0, 0, 20)) == 20
    finally:
        service.close()


def test_consumer_lag_counts_unpopped_messages_and_the_age_of_the_oldest(
    store: MemoryMessageStore,
) -> None:
    now_ms = [PRODUCED_MS]

    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin(f"{s.topic}/{s.partition_id}", 1, Limits().partition_limits())
        return HostedReplica(s, twin, store, LIMITS, _no_peer, shared_flush_pool())

    service = BrokerService(store, make_replica, LIMITS, lambda: now_ms[0])
    service.host(_spec(Limits().partition_limits()))
    try:
        service.produce("orders", P0, (NewMessage(value="m"),) * 10, None, None)
        service.pop("orders", P0, "reader", 4, None)
        now_ms[0] += 7_500
        consumers, partitions = service.consumer_lag("orders")
        assert consumers == [
            {
                "topic": "orders",
                "partition_id": 0,
                "consumer_id": "reader",
                "offset": 4,
                "end_offset": 10,
                "lag_messages": 6,
                "lag_s": 7.5,
            }
        ]
        assert partitions[0]["offset"] == 0 and partitions[0]["lag_messages"] == 10
        service.pop("orders", P0, "reader", 100, None)
        (caught_up,), _ = service.consumer_lag("orders")
        assert caught_up["lag_messages"] == 0 and caught_up["lag_s"] == 0
        assert service.consumer_lag("other") == ([], [])
    finally:
        service.close()
