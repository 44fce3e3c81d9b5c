"""Issue 19 items 4, 5 and 7, on the pure log and the in-process broker.

* Flush marks across a slot reset: a replica's database holds ``[log start, flushed)``
  without a hole whatever order resets and marks arrive in (review findings G7, G8).
* Pops against retention: a repeated pop answers what retention left of its range, and a
  failed read after a pop was applied is an unknown outcome, never "nothing done" (G2);
  messages are stamped with partition time, which age retention compares them with (G12).
* Late copies from raw clients: recent request ids per consumer, bounded (item 7).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from dataclasses import fields

import pytest

from broker.hosted_replica import HostedReplica
from broker.partition.commands import (
    MarkFlushed,
    ResetReplica,
    from_wire,
    to_wire,
)
from broker.partition.log import Consumed, Flushed, PartitionLog, Rejected
from broker.partition.raft import PartitionTwin, partition_twin
from broker.partition.replica import PartitionReplica
from broker.persistence.flusher import Flusher
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.deadline import Deadline
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

LIMITS = PartitionLimits(
    unflushed_messages_max=100,
    unflushed_bytes_max=10_000,
    replica_lag_messages_max=30,
    producers_max=3,
    sequences_remembered=2,
    consumers_max=4,
    request_ids_remembered=3,
)
OLD, NEW = "127.0.0.1:9001", "127.0.0.1:9101"
"""The Raft addresses of slot 1's replica before and after it moved."""
R1 = ReplicaId(1)


def filled_log(messages: int = 10) -> PartitionLog:
    log = PartitionLog(3, LIMITS)
    log.append([(None, str(i)) for i in range(messages)], 1_000, None, None)
    return log


def state(log: PartitionLog) -> tuple[object, ...]:
    return (list(log.flushed_offsets), list(log.holders), log.evicted_offset, len(log.messages))


# --- A. flush marks across a slot reset ------------------------------------------------------


def test_reset_and_flush_marks_carry_the_holder_on_the_wire_and_old_forms_still_decode() -> None:
    for command in (
        ResetReplica(R1, NEW),
        MarkFlushed(R1, Offset(9), Offset(4), NEW),
        MarkFlushed(R1, Offset(9), Offset(4), None),
    ):
        assert from_wire(to_wire(command)) == command
    assert to_wire(ResetReplica(R1, NEW)) == ("reset_replica", 1, NEW)
    assert from_wire(("reset_replica", 1)) == ResetReplica(R1, None)
    assert from_wire(("mark_flushed", 1, 9, 4)) == MarkFlushed(R1, Offset(9), Offset(4), None)
    assert from_wire(("reset_replica", 1, 7)) is None
    assert from_wire(("mark_flushed", 1, 9, 4, 7)) is None


def test_a_reset_records_the_new_holder_and_only_its_marks_move_the_slot() -> None:
    log = filled_log()
    log.mark_flushed(R1, 8, 0, OLD)
    assert log.reset_replica(R1, NEW) == Flushed(Offset(0), Offset(0))
    assert log.holders == [None, NEW, None] and log.flushed_offsets[1] == 0
    assert log.mark_flushed(R1, 4, 0, NEW) == Flushed(Offset(4), Offset(0))


def test_the_old_members_mark_after_the_reset_changes_nothing() -> None:
    """A leaving member still flushing: its marks, even contiguous ones, are not the slot's."""
    log = filled_log()
    log.reset_replica(R1, NEW)
    before = state(log)
    assert log.mark_flushed(R1, 6, 0, OLD) == Flushed(Offset(0), Offset(0))
    assert state(log) == before


def test_a_mark_without_an_address_is_ignored_once_a_holder_is_recorded() -> None:
    log = filled_log()
    log.reset_replica(R1, NEW)
    assert log.mark_flushed(R1, 6, 0) == Flushed(Offset(0), Offset(0))
    assert log.mark_flushed(R1, 6) == Flushed(Offset(0), Offset(0))


def test_the_new_members_mark_from_a_stale_view_changes_nothing() -> None:
    """G7: the new member loaded a dump taken before the reset, where the slot held the old
    member's offset 8; its flusher sends a mark from 8 (a batch, or the 'sync when behind'
    mark that repeats the offset). Its database is empty below 8: no hole may be claimed."""
    log = filled_log()
    log.mark_flushed(R1, 8, 0, OLD)
    log.reset_replica(R1, NEW)
    assert log.mark_flushed(R1, 10, 8, NEW) == Flushed(Offset(0), Offset(0))
    assert log.mark_flushed(R1, 8, 8, NEW) == Flushed(Offset(0), Offset(0))
    assert log.flushed_offsets[1] == 0


def test_reset_then_stale_mark_and_stale_mark_then_reset_end_the_same() -> None:
    """Whatever order the reset and a stale mark are committed in, the slot ends at 0."""
    stale = MarkFlushed(R1, Offset(10), Offset(8), NEW)
    reset = ResetReplica(R1, NEW)
    ends = []
    for order in ((reset, stale), (stale, reset)):
        log = filled_log()
        log.mark_flushed(R1, 8, 0, OLD)
        for command in order:
            log.apply(command)
        ends.append(state(log))
    assert ends[0] == ends[1] and ends[0][0] == [0, 0, 0]


def test_a_legacy_slot_without_a_holder_takes_any_mark_as_before() -> None:
    log = filled_log()
    assert log.mark_flushed(R1, 3) == Flushed(Offset(3), Offset(0))
    assert log.mark_flushed(R1, 5, 3, OLD) == Flushed(Offset(5), Offset(0))
    log.reset_replica(R1)  # an entry from before resets carried an address
    assert log.holders[1] is None
    assert log.mark_flushed(R1, 2, 0) == Flushed(Offset(2), Offset(0))


def test_a_reset_that_would_lose_the_last_copy_is_refused_and_changes_nothing() -> None:
    """G8: only slot 0 still has what left memory. Before, the reset zeroed the slot, then
    the invariant check raised, and the group answered 'rejected' with the state changed."""
    log = filled_log()
    for slot in (0, 1, 2):
        log.mark_flushed(ReplicaId(slot), 10, 0)
    log.reset_replica(ReplicaId(1), NEW)
    log.reset_replica(ReplicaId(2), "127.0.0.1:9102")
    before = state(log)
    refused = log.reset_replica(ReplicaId(0), "127.0.0.1:9100")
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.REFUSED
    assert state(log) == before


def test_a_repeated_reset_for_the_same_holder_keeps_its_progress() -> None:
    """A Raft address is never reused: a repeat of the reset (a resumed membership change)
    must not send the new replica back to 0."""
    log = filled_log()
    log.reset_replica(R1, NEW)
    log.mark_flushed(R1, 6, 0, NEW)
    assert log.reset_replica(R1, NEW) == Flushed(Offset(6), Offset(0))
    assert log.reset_replica(R1, "127.0.0.1:9201") == Flushed(Offset(0), Offset(0))


def test_a_snapshot_from_before_holders_loads_with_every_holder_unknown() -> None:
    log = filled_log()
    log.mark_flushed(R1, 4)
    old_state = dict(vars(log))
    del old_state["holders"]
    restored = PartitionLog.__new__(PartitionLog)
    restored.__setstate__(pickle.loads(pickle.dumps(old_state)))
    assert restored.holders == [None, None, None]
    assert restored.mark_flushed(R1, 6, 4, OLD) == Flushed(Offset(6), Offset(0))


def recording_twin(replica_count: int) -> PartitionTwin:
    """The in-memory twin: it records every group proposed (``applied``)."""
    return partition_twin("orders/0", replica_count, LIMITS)


def flusher_spec(slot: int, replicas: int = 3) -> ReplicaSpec:
    addresses = tuple(
        ReplicaAddress(ReplicaId(i), BrokerId(i + 1), f"http://b{i}", f"127.0.0.1:{9100 + i}")
        for i in range(replicas)
    )
    return ReplicaSpec("orders", PartitionId(0), ReplicaId(slot), addresses, LIMITS)


def flusher_of(slot: int, consensus: PartitionTwin) -> tuple[Flusher, PartitionReplica]:
    spec = flusher_spec(slot)
    replica = PartitionReplica(spec, consensus, Limits())
    return Flusher(replica, MemoryMessageStore(), Limits(), _no_peer), replica


def _no_peer(spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
    return []


def marks(consensus: PartitionTwin) -> list[MarkFlushed]:
    return [c for group in consensus.applied for c in group if isinstance(c, MarkFlushed)]


def test_the_flusher_sends_its_address_and_start_with_a_batch_and_a_sync_mark() -> None:
    consensus = recording_twin(3)
    flusher, replica = flusher_of(0, consensus)
    replica.append([(None, "a"), (None, "b")], 1_000, None, None)
    assert flusher.flush_once() == 2
    replica.append([(None, "c")], 1_001, None, None, synced=False)  # durable < end
    assert flusher.flush_once() == 0
    addr = "127.0.0.1:9100"
    assert marks(consensus) == [
        MarkFlushed(ReplicaId(0), Offset(2), Offset(0), addr),
        MarkFlushed(ReplicaId(0), Offset(2), Offset(2), addr),  # G7: it had no start
    ]


def test_the_skip_to_the_log_start_carries_the_offset_it_was_read_at() -> None:
    consensus = recording_twin(3)
    flusher, replica = flusher_of(2, consensus)
    replica.append([(None, str(i)) for i in range(10)], 1_000, None, None)
    for slot in (0, 1):
        consensus.propose([MarkFlushed(ReplicaId(slot), Offset(10), Offset(0))])
    replica.truncate(Offset(10))
    flusher.flush_once()
    assert marks(consensus)[-1] == MarkFlushed(
        ReplicaId(2), Offset(10), Offset(0), "127.0.0.1:9102"
    )
    assert replica.read(lambda log: log.flushed_offsets[2]) == 10


def test_a_skip_to_the_log_start_read_before_a_reset_changes_nothing_after_it() -> None:
    log = filled_log(40)
    log.mark_flushed(R1, 4, 0, OLD)  # lags past the bound: eviction goes on without it
    for slot in (0, 2):
        log.mark_flushed(ReplicaId(slot), 40, 0)
    log.truncate(40)
    log.reset_replica(R1, NEW)  # between the flusher's read (4) and its mark
    assert log.mark_flushed(R1, 40, 4, NEW) == Flushed(Offset(0), Offset(40))
    assert log.mark_flushed(R1, 40, 0, NEW) == Flushed(Offset(40), Offset(40))


# --- B. retention against claimed ranges and clocks ---------------------------------------


def flushed_everywhere(log: PartitionLog) -> None:
    for slot in (0, 1, 2):
        log.mark_flushed(ReplicaId(slot), log.end_offset, 0)


def test_a_pop_repeated_after_retention_answers_the_retained_part_of_its_range() -> None:
    log = filled_log(20)
    assert log.consume("c", 10, "r1", 1_000, 7) == Consumed(Offset(0), Offset(10))
    flushed_everywhere(log)
    log.truncate(6)  # retention passed into the claimed, unanswered range
    assert log.consume("c", 10, "r1", 1_001, 7) == Consumed(Offset(6), Offset(10))
    log.truncate(15)  # ... and past it: nothing of it is left
    assert log.consume("c", 10, "r1", 1_002, 7) == Consumed(Offset(10), Offset(10))
    assert log.consume("c", 10, "r2", 1_003, 8) == Consumed(Offset(15), Offset(20))


def test_a_request_id_repeated_after_retention_answers_the_retained_part() -> None:
    log = filled_log(20)
    assert log.consume("c", 10, "r1", 1_000) == Consumed(Offset(0), Offset(10))
    flushed_everywhere(log)
    log.truncate(4)
    assert log.consume("c", 10, "r1", 1_001) == Consumed(Offset(4), Offset(10))
    assert log.consumers["c"].offset == 10  # nothing claimed again


def test_messages_are_stamped_with_partition_time_which_never_goes_back() -> None:
    """A proposer whose clock runs behind cannot make a new message look old to age
    retention, which compares stamps with partition time (``Flusher``)."""
    log = PartitionLog(3, LIMITS)
    log.append([(None, "a")], 5_000, None, None)
    log.append([(None, "b")], 2_000, None, None)  # a proposer 3 s behind
    assert [stamp for _, (_, _, stamp, _) in log.read(0, 2)] == [5_000, 5_000]
    assert log.clock_ms == 5_000


class ForgetfulStore(MemoryMessageStore):
    """A database whose rows vanish under the reader: retention deleted them between the
    pop's apply and its read (the race G2 describes)."""

    def read_messages(
        self, topic: str, partition_id: int, start: int, end: int
    ) -> list[StoredMessage]:
        return []


class StuckStore(MemoryMessageStore):
    """A database that takes no rows: this replica never flushes."""

    def insert_messages(self, *args: object, **kwargs: object) -> None:
        raise RaftQError(ErrorCode.UNAVAILABLE, "the database is away in this test")


def service_over(store: MemoryMessageStore, replicas: int) -> BrokerService:
    spec = flusher_spec(0, replicas)

    def make_replica(s: ReplicaSpec) -> HostedReplica:
        twin = partition_twin("orders/0", replicas, LIMITS)
        return HostedReplica(
            s, twin, store, Limits(flush_period_s=0.01), _no_peer, shared_flush_pool()
        )

    service = BrokerService(store, make_replica, Limits(), lambda: 1_000)
    service.host(spec)
    return service


def wait_for(condition: Callable[[], bool], what: str) -> None:
    until_s = time.monotonic() + 10.0
    while not condition():
        assert time.monotonic() < until_s, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_pop_whose_read_fails_after_it_claimed_answers_an_unknown_outcome() -> None:
    """REFUSED would tell a raw client "nothing done": it would start a new pop and skip
    the range. The same pop repeated gets it again."""
    service = service_over(ForgetfulStore(), 1)
    try:
        service.produce("orders", PartitionId(0), (NewMessage(value="m"),) * 5, None, None)
        replica = service._replica("orders", PartitionId(0))
        wait_for(lambda: replica.partition.read(lambda log: log.evicted_offset) == 5, "a flush")
        with pytest.raises(RaftQError) as failed:
            service.pop("orders", PartitionId(0), "c", 5, "r1", 1)
        assert failed.value.code is ErrorCode.UNAVAILABLE
        assert not failed.value.code.proves_nothing_done
        assert replica.partition.read(lambda log: log.consumers["c"].offset) == 5
        with pytest.raises(RaftQError) as refused:
            service.fetch("orders", PartitionId(0), 0, 5)  # a fetch claims nothing
        assert refused.value.code is ErrorCode.REFUSED
    finally:
        service.close()


def test_a_replica_still_copying_refuses_a_pop_before_claiming_anything() -> None:
    service = service_over(StuckStore(), 3)
    try:
        service.produce("orders", PartitionId(0), (NewMessage(value="m"),) * 40, None, None)
        replica = service._replica("orders", PartitionId(0))
        for slot in (1, 2):  # the other two flushed; this one lags past the bound
            replica.partition.mark_flushed(ReplicaId(slot), Offset(40), Offset(0))
        with pytest.raises(RaftQError) as refused:
            service.pop("orders", PartitionId(0), "c", 5, "r1", 1)
        assert refused.value.code is ErrorCode.REFUSED
        assert replica.partition.read(lambda log: dict(log.consumers)) == {}
    finally:
        service.close()


# --- C. late copies from raw clients -------------------------------------------------------


def test_the_last_n_request_ids_are_remembered_and_the_one_before_is_forgotten() -> None:
    log = filled_log(60)
    ranges = [log.consume("c", 5, f"r{i}", 1_000 + i) for i in range(4)]
    assert ranges == [Consumed(Offset(5 * i), Offset(5 * i + 5)) for i in range(4)]
    # r1..r3 (3 = request_ids_remembered): a late copy gets its range and claims nothing.
    for i in (1, 2, 3):
        assert log.consume("c", 5, f"r{i}", 2_000) == ranges[i]
    assert log.consumers["c"].offset == 20
    # r0 is forgotten: it is taken for a new pop.
    assert log.consume("c", 5, "r0", 2_001) == Consumed(Offset(20), Offset(25))
    assert list(log.consumers["c"].request_ranges) == ["r2", "r3", "r0"]


def test_a_late_copy_of_a_remembered_request_id_is_clamped_to_the_log_start() -> None:
    log = filled_log(30)
    first = log.consume("c", 5, "a", 1_000)
    log.consume("c", 5, "b", 1_001)
    flushed_everywhere(log)
    log.truncate(3)
    assert first == Consumed(Offset(0), Offset(5))
    assert log.consume("c", 5, "a", 1_002) == Consumed(Offset(3), Offset(5))
    assert log.consumers["c"].offset == 10


def test_pops_with_a_sequence_remember_no_request_ids() -> None:
    log = filled_log(30)
    log.consume("c", 5, "a", 1_000, 1)
    assert not log.consumers["c"].request_ranges


def test_request_ids_travel_in_snapshots_and_old_consumers_load_without_them() -> None:
    log = filled_log(30)
    log.consume("c", 5, "a", 1_000)
    log.consume("c", 5, "b", 1_001)
    restored = pickle.loads(pickle.dumps(log))
    assert restored.consume("c", 5, "a", 1_002) == Consumed(Offset(0), Offset(5))
    old = pickle.loads(pickle.dumps(log.consumers["c"]))
    old.__setstate__(old.__getstate__()[:4])  # written before request_ranges existed
    assert not old.request_ranges and old.last_request_id == "b"


def test_limits_from_before_request_ids_were_remembered_keep_only_the_last() -> None:
    names = [spec.name for spec in fields(PartitionLimits)]
    # Pickled by position: it was added last, and the consumer groups' limits after it.
    before = names[: names.index("request_ids_remembered")]
    later = ["groups_max", "group_leases_max", "group_unsettled_max", "group_scan_max"]
    assert names[len(before) :] == ["request_ids_remembered", *later]
    old = PartitionLimits.__new__(PartitionLimits)
    old.__setstate__([getattr(LIMITS, name) for name in before])
    log = filled_log(30)
    log.limits = old
    restored = PartitionLog.__new__(PartitionLog)
    restored.__setstate__(dict(vars(log)))  # as unpickling a dump from then does
    assert restored.limits.request_ids_remembered == 1
    wire = {k: v for k, v in LIMITS.to_json().items() if k != "request_ids_remembered"}
    assert PartitionLimits.from_json(wire).request_ids_remembered == 1
    assert Limits().partition_limits().request_ids_remembered == 8


def test_an_idle_partition_ages_by_the_time_this_host_saw_pass_not_its_wall_clock() -> None:
    flusher, _ = flusher_of(0, recording_twin(3))
    assert flusher._partition_now_ms(1_000, 50.0) == 1_000
    assert flusher._partition_now_ms(1_000, 52.5) == 3_500  # idle: 2.5 s seen to pass
    assert flusher._partition_now_ms(2_000, 53.0) == 2_000  # moved: counts from here


# --- C. deadlines as points in wall time -----------------------------------------------------


def test_a_request_read_after_its_absolute_deadline_is_already_expired() -> None:
    """A broker stopped (SIGSTOP) with the request in its socket buffer reads it late: the
    relative budget alone would give it a fresh 5 s; the absolute one says the caller left."""
    sent_wall_ms, read_wall_ms = 1_000_000, 1_030_000  # read 30 s after it was sent
    sender = Deadline.after(5.0, now_s=100.0)
    epoch = sender.epoch_header_value(100.0, sent_wall_ms, reply_margin_s=0.2)
    relative = sender.header_value(100.0, reply_margin_s=0.2)
    read = Deadline.from_headers(relative, epoch, 7.0, read_wall_ms, 10.0, skew_s=1.0)
    assert read.expired(7.0)


def test_the_absolute_deadline_grants_skew_and_never_extends_the_relative_one() -> None:
    epoch = str(1_000_000 + 4_800)  # 4.8 s after the sender's now
    ahead = Deadline.from_headers("4800", epoch, 0.0, 1_000_000 + 5_500, 10.0, skew_s=1.0)
    assert ahead.remaining_s(0.0) == pytest.approx(0.3)  # 0.7 s ahead: still 0.3 s left
    behind = Deadline.from_headers("4800", epoch, 0.0, 1_000_000 - 60_000, 10.0, skew_s=1.0)
    assert behind.remaining_s(0.0) == pytest.approx(4.8)  # never later than the budget
    old_caller = Deadline.from_headers("4800", None, 0.0, 0, 10.0, skew_s=1.0)
    assert old_caller.remaining_s(0.0) == pytest.approx(4.8)
    malformed = Deadline.from_headers("4800", "soon", 0.0, 0, 10.0, skew_s=1.0)
    assert malformed.remaining_s(0.0) == pytest.approx(4.8)
