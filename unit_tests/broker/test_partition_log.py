"""PartitionLog, the pure partition state machine: offsets, idempotence, pops, flush and
eviction, bounds, and determinism (two replicas applying the same commands agree)."""

from __future__ import annotations

import pickle
import random

import pytest

from broker.partition.commands import (
    Append,
    Command,
    Consume,
    MarkFlushed,
    Receive,
    ResetReplica,
    Settle,
    from_wire,
    to_wire,
)
from broker.partition.log import (
    Appended,
    Consumed,
    Flushed,
    PartitionLog,
    Rejected,
)
from broker.partition.raft import partition_twin
from protocol.errors import ErrorCode
from protocol.limits import PartitionLimits
from protocol.types import Offset, ReplicaId

LIMITS = PartitionLimits(
    unflushed_messages_max=100,
    unflushed_bytes_max=10_000,
    replica_lag_messages_max=30,
    producers_max=3,
    sequences_remembered=2,
    consumers_max=2,
)


def new_log() -> PartitionLog:
    return PartitionLog(3, LIMITS)


def batch(*values: str) -> list[tuple[str | None, str]]:
    return [(None, v) for v in values]


def test_offsets_are_contiguous_from_zero() -> None:
    log = new_log()
    assert log.append(batch("a", "b"), 1, None, None) == Appended(
        Offset(0), Offset(2), duplicate=False
    )
    assert log.append(batch("c"), 2, None, None) == Appended(Offset(2), Offset(3), duplicate=False)
    assert [o for o, _ in log.read(0, 10)] == [0, 1, 2]
    assert log.read(1, 2) == [(1, (None, "b", 1, ()))]


def test_empty_append_is_rejected_and_changes_nothing() -> None:
    log = new_log()
    result = log.append([], 1, None, None)
    assert isinstance(result, Rejected) and result.code == ErrorCode.INVALID_FIELD
    assert log.end_offset == 0


def test_retried_sequence_returns_original_offsets_and_appends_nothing() -> None:
    log = new_log()
    first = log.append(batch("a", "b"), 1, "p", 7)
    log.append(batch("c"), 1, "q", 1)
    again = log.append(batch("a", "b"), 9, "p", 7)
    assert first == Appended(Offset(0), Offset(2), duplicate=False)
    assert again == Appended(Offset(0), Offset(2), duplicate=True)
    assert log.end_offset == 3


def test_sequences_may_skip_but_not_go_back_past_the_window() -> None:
    log = new_log()
    for sequence in (1, 5, 9):
        assert isinstance(log.append(batch("x"), 1, "p", sequence), Appended)
    # 5 and 9 are remembered (window of 2); 1 is too old to be told apart from a new batch.
    assert log.append(batch("x"), 1, "p", 5) == Appended(Offset(1), Offset(2), duplicate=True)
    old = log.append(batch("x"), 1, "p", 1)
    assert isinstance(old, Rejected) and old.code == ErrorCode.SEQUENCE_OUT_OF_ORDER
    assert log.end_offset == 3


def test_holds_batch_names_exactly_the_remembered_sequences() -> None:
    """What ``append`` would answer as a duplicate: remembered sequences only."""
    log = new_log()
    for sequence in (1, 5, 9):
        log.append(batch("x"), 1, "p", sequence)
    assert [log.holds_batch("p", s) for s in (1, 5, 9, 10)] == [False, True, True, False]
    assert not log.holds_batch("q", 5)


def test_least_recently_used_producer_is_forgotten_past_the_bound() -> None:
    log = new_log()
    for producer in ("p1", "p2", "p3", "p4"):
        log.append(batch("x"), 1, producer, 1)
    assert list(log.producers) == ["p2", "p3", "p4"]


def test_pop_advances_and_a_repeated_request_id_gets_the_same_range() -> None:
    log = new_log()
    log.append(batch("a", "b", "c"), 1, None, None)
    assert log.consume("c1", 2, "r1") == Consumed(Offset(0), Offset(2))
    assert log.consume("c1", 2, "r1") == Consumed(Offset(0), Offset(2))
    assert log.consume("c1", 2, "r2") == Consumed(Offset(2), Offset(3))
    assert log.consume("c1", 2, "r3") == Consumed(Offset(3), Offset(3))
    assert log.consume("c2", 5, None) == Consumed(Offset(0), Offset(3))


def test_consumers_are_bounded() -> None:
    log = new_log()
    log.consume("c1", 1, None)
    log.consume("c2", 1, None)
    result = log.consume("c3", 1, None)
    assert isinstance(result, Rejected) and result.code == ErrorCode.TOO_MANY
    bad = log.consume("c1", 0, None)
    assert isinstance(bad, Rejected) and bad.code == ErrorCode.INVALID_FIELD


def test_messages_leave_memory_only_when_every_replica_flushed_them() -> None:
    log = new_log()
    log.append(batch("a", "b", "c"), 1, None, None)
    assert log.mark_flushed(ReplicaId(0), 3) == Flushed(Offset(3), Offset(0))
    assert log.mark_flushed(ReplicaId(1), 2) == Flushed(Offset(2), Offset(0))
    assert log.replicated_bitmask(2) == 0b110
    assert log.mark_flushed(ReplicaId(2), 2) == Flushed(Offset(2), Offset(2))
    assert log.replicated_bitmask(0) == 0
    assert sorted(log.messages) == [2]
    assert log.read(0, 3) == [(2, (None, "c", 1, ()))]


def test_a_replica_lagging_too_far_no_longer_holds_memory_but_a_majority_does() -> None:
    log = new_log()
    log.append(batch(*["x"] * 60), 1, None, None)
    log.mark_flushed(ReplicaId(0), 60)
    assert log.evicted_offset == 0  # only one replica has them: keep them
    log.mark_flushed(ReplicaId(1), 60)
    assert log.evicted_offset == 60  # replica 2 is 60 behind (> 30): stop waiting for it
    assert log.messages == {} and log.lagging(ReplicaId(2)) and not log.lagging(ReplicaId(0))
    assert log.replicated_bitmask(10) == 0b100
    log.append(batch("y"), 2, None, None)
    log.mark_flushed(ReplicaId(2), 60)  # it copied [0, 60) from a peer
    assert not log.lagging(ReplicaId(2)) and log.evicted_offset == 60


def test_a_replica_within_the_lag_bound_holds_eviction_back() -> None:
    log = new_log()
    log.append(batch(*["x"] * 40), 1, None, None)
    log.mark_flushed(ReplicaId(2), 20)
    log.mark_flushed(ReplicaId(0), 40)
    log.mark_flushed(ReplicaId(1), 40)  # replica 2 is 20 behind (<= 30): still waited for
    assert log.evicted_offset == 20 and not log.lagging(ReplicaId(2))


def test_mark_flushed_is_idempotent_and_checks_its_input() -> None:
    log = new_log()
    log.append(batch("a", "b"), 1, None, None)
    log.mark_flushed(ReplicaId(0), 2)
    assert log.mark_flushed(ReplicaId(0), 1) == Flushed(Offset(2), Offset(0))
    past_end = log.mark_flushed(ReplicaId(1), 3)
    assert isinstance(past_end, Rejected) and past_end.code == ErrorCode.INVALID_FIELD
    no_replica = log.mark_flushed(ReplicaId(3), 1)
    assert isinstance(no_replica, Rejected)
    assert log.flushed_offsets == [2, 0, 0]


def test_backpressure_past_the_unflushed_bound_then_relief_after_flush() -> None:
    log = new_log()
    assert isinstance(log.append(batch(*["x"] * 100), 1, None, None), Appended)
    full = log.append(batch("y"), 1, None, None)
    assert isinstance(full, Rejected) and full.code == ErrorCode.BACKPRESSURE
    for replica in range(3):
        log.mark_flushed(ReplicaId(replica), 50)
    assert isinstance(log.append(batch("y"), 1, None, None), Appended)
    too_big = log.append(batch("z" * 20_000), 1, None, None)
    assert isinstance(too_big, Rejected) and too_big.code == ErrorCode.BACKPRESSURE


def _random_commands(seed: int, count: int) -> list[tuple[str, tuple[object, ...]]]:
    rng = random.Random(seed)
    commands: list[tuple[str, tuple[object, ...]]] = []
    end = 0
    for _ in range(count):
        kind = rng.choice(["append", "consume", "flush", "group"])
        if kind == "append":
            size = rng.randint(1, 4)
            producer = rng.choice([None, "p1", "p2"])
            sequence = None if producer is None else rng.randint(0, 20)
            commands.append(
                ("append", (batch(*["m"] * size), rng.randint(0, 9), producer, sequence))
            )
            end += size
        elif kind == "consume":
            args = (rng.choice(["c1", "c2"]), rng.randint(1, 5), rng.choice(["r1", "r2", None]))
            commands.append(("consume", args))
        elif kind == "group":
            commands.append(("apply", (_random_group_command(rng, end),)))
        elif rng.random() < 0.05:  # re-replication: a slot starts again from 0
            commands.append(("reset_replica", (rng.randint(0, 2),)))
        else:
            start = rng.choice([None, rng.randint(0, end)])
            commands.append(("mark_flushed", (rng.randint(0, 2), rng.randint(0, end), start)))
    return commands


def _random_group_command(rng: random.Random, end: int) -> Command:
    group, now_ms = rng.choice(["g1", "g2"]), rng.randint(0, 5_000)
    if rng.random() < 0.5:
        request_id = rng.choice(["q1", "q2", None])
        return Receive(group, rng.randint(1, 4), now_ms, request_id, 1_000, 2, rng.random() < 0.5)
    receipts = tuple((rng.randint(0, max(end, 1)), rng.randint(1, 3)) for _ in range(3))
    action = rng.choice(["ack", "nack", "extend"])
    return Settle(group, action, receipts, now_ms, rng.choice([0, 500]))


@pytest.mark.parametrize("seed", range(5))
def test_replicas_applying_the_same_commands_agree(seed: int) -> None:
    """Determinism: the same commands give the same results and state, and a snapshot
    (pickle, as pysyncobj takes it) restores an identical replica."""
    one, two = new_log(), new_log()
    for name, args in _random_commands(seed, 300):
        assert getattr(one, name)(*args) == getattr(two, name)(*args)
        covered = [o for o, _ in one.read(0, one.end_offset)]
        assert covered == list(range(one.evicted_offset, one.end_offset))
    restored = pickle.loads(pickle.dumps(one))
    assert restored.__dict__ == two.__dict__


def test_bitmasks_of_a_range_equal_the_mask_of_each_offset() -> None:
    log = new_log()
    log.append(batch(*[str(i) for i in range(20)]), 1, None, None)
    log.mark_flushed(ReplicaId(0), 12)
    log.mark_flushed(ReplicaId(2), 5)
    for start, end in [(0, 20), (3, 15), (5, 12), (12, 20), (0, 0), (7, 8)]:
        assert log.replicated_bitmasks(start, end) == [
            log.replicated_bitmask(offset) for offset in range(start, end)
        ]


def test_a_late_copy_of_an_older_pop_claims_nothing() -> None:
    log = new_log()
    log.append(batch(*(f"m{i}" for i in range(30))), 0, None, None)
    assert log.consume("c", 10, "a", 1, sequence=100) == Consumed(Offset(0), Offset(10))
    assert log.consume("c", 10, "a", 1, sequence=100) == Consumed(Offset(0), Offset(10))
    assert log.consume("c", 10, "b", 2, sequence=200) == Consumed(Offset(10), Offset(20))
    late = log.consume("c", 10, "a", 3, sequence=100)
    assert isinstance(late, Rejected) and late.code is ErrorCode.SEQUENCE_OUT_OF_ORDER
    assert log.consume("c", 10, "c", 4, sequence=300) == Consumed(Offset(20), Offset(30))


def test_pops_without_a_sequence_still_repeat_by_request_id() -> None:
    log = new_log()
    log.append(batch("x", "y"), 0, None, None)
    assert log.consume("c", 1, "a", 1) == Consumed(Offset(0), Offset(1))
    assert log.consume("c", 1, "a", 1) == Consumed(Offset(0), Offset(1))
    assert log.consume("c", 1, "b", 1, sequence=5) == Consumed(Offset(1), Offset(2))
    assert log.consume("c", 1, "b", 1, sequence=5) == Consumed(Offset(1), Offset(2))


def test_a_consumer_from_an_old_snapshot_has_no_sequence_yet() -> None:
    log = new_log()
    log.append(batch("x", "y"), 0, None, None)
    log.consume("c", 1, "a", 1)
    consumer = log.consumers["c"]
    old_state = consumer.__getstate__()[:3]  # as pickled before pops carried a sequence
    restored = type(consumer).__new__(type(consumer))
    restored.__setstate__(old_state)
    assert restored.last_sequence is None and restored.offset == consumer.offset
    assert pickle.loads(pickle.dumps(consumer)) == consumer


def test_a_consume_with_a_sequence_round_trips_on_the_wire() -> None:
    command = Consume("c", 5, "r", 1_700_000_000_000, 42)
    assert from_wire(to_wire(command)) == command
    assert from_wire(("consume", "c", 5, "r", 1, "42")) is None


def test_limits_pickled_under_their_old_module_still_load() -> None:
    """Full dumps written before ``PartitionLimits`` moved to ``protocol`` name it by the
    module it was defined in."""
    old = pickle.dumps(LIMITS, protocol=0).replace(b"protocol.limits", b"broker.partition.log")
    assert b"broker.partition.log" in old
    assert pickle.loads(old) == LIMITS


def test_only_a_synced_entry_makes_what_came_before_durable() -> None:
    twin = partition_twin("t/0", 3, LIMITS)
    twin.propose([Append(((None, "a"),), 1, None, None)], synced=False)
    assert twin.read(lambda log: (log.durable_end_offset, log.end_offset)) == (0, 1)
    twin.propose([MarkFlushed(ReplicaId(0), Offset(0))])
    assert twin.read(lambda log: log.durable_end_offset) == 1


def test_a_log_from_before_durable_offsets_counts_everything_durable() -> None:
    log = new_log()
    log.append(batch("x", "y"), 0, None, None)
    state = dict(vars(log))
    del state["durable_end_offset"]
    restored = PartitionLog.__new__(PartitionLog)
    restored.__setstate__(state)
    assert restored.durable_end_offset == 2


def test_a_reset_slot_starts_from_zero_and_nothing_in_memory_leaves() -> None:
    """Re-replication: the slot of a dead replica now belongs to a new, empty one."""
    log = new_log()
    log.append(batch(*[str(i) for i in range(10)]), 1, None, None)
    for replica in (0, 1, 2):
        log.mark_flushed(ReplicaId(replica), 6)
    assert log.evicted_offset == 6
    assert log.reset_replica(1) == Flushed(Offset(0), Offset(6))
    assert log.flushed_offsets == [6, 0, 6] and log.evicted_offset == 6
    assert log.lagging(ReplicaId(1))  # it copies [0, 6) from a peer's database
    assert [o for o, _ in log.read(0, 10)] == [6, 7, 8, 9]  # still in memory
    rejected = log.reset_replica(3)
    assert isinstance(rejected, Rejected) and rejected.code == ErrorCode.INVALID_FIELD


def test_after_a_reset_eviction_goes_on_without_the_new_replica_while_it_is_far_behind() -> None:
    log = new_log()  # replica_lag_messages_max = 30
    log.append(batch(*[str(i) for i in range(60)]), 1, None, None)
    log.reset_replica(2)
    log.mark_flushed(ReplicaId(0), 50)
    log.mark_flushed(ReplicaId(1), 40)
    assert log.evicted_offset == 40  # a majority (0 and 1) has [0, 40); 2 copies it
    log.mark_flushed(ReplicaId(2), 30, start=0)  # within the lag bound again...
    log.mark_flushed(ReplicaId(0), 60)
    log.mark_flushed(ReplicaId(1), 60)
    assert log.evicted_offset == 40  # ...so eviction waits for it (and never goes back)
    log.mark_flushed(ReplicaId(2), 55, start=30)
    assert log.evicted_offset == 55


def test_a_flush_mark_from_a_stale_start_changes_nothing() -> None:
    """A batch written from offset 8 by a replica whose slot was reset to 0 meanwhile (its
    state was a snapshot from before the reset) must not claim [0, 8) is in its database."""
    log = new_log()
    log.append(batch(*[str(i) for i in range(10)]), 1, None, None)
    log.mark_flushed(ReplicaId(1), 8)
    log.reset_replica(1)
    assert log.mark_flushed(ReplicaId(1), 10, start=8) == Flushed(Offset(0), Offset(0))
    assert log.flushed_offsets[1] == 0
    assert log.mark_flushed(ReplicaId(1), 4, start=0) == Flushed(Offset(4), Offset(0))
    assert log.mark_flushed(ReplicaId(1), 10, start=4).flushed_offset == 10  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "command",
    [ResetReplica(ReplicaId(2)), MarkFlushed(ReplicaId(1), Offset(9), Offset(4))],
)
def test_re_replication_commands_survive_the_wire(command: object) -> None:
    assert from_wire(to_wire(command)) == command  # type: ignore[arg-type]


def test_old_two_field_flush_marks_still_decode() -> None:
    assert from_wire(("mark_flushed", 1, 9)) == MarkFlushed(ReplicaId(1), Offset(9), None)
    assert from_wire(("reset_replica", True)) is None
    assert from_wire(("reset_replica", 1, 2)) is None


def test_headers_travel_with_their_message_and_count_towards_the_bytes() -> None:
    log = new_log()
    tagged = ("k", "v", (("trace", "t1"),))
    assert log.apply(from_wire(to_wire(Append((tagged, (None, "w")), 7, None, None))))
    assert log.read(0, 2) == [(0, ("k", "v", 7, (("trace", "t1"),))), (1, (None, "w", 7, ()))]
    assert log.unflushed_bytes == len("kv") + len("tracet1") + len("w")
    log.mark_flushed(ReplicaId(0), 2)
    log.mark_flushed(ReplicaId(1), 2)
    log.mark_flushed(ReplicaId(2), 2)
    assert log.unflushed_bytes == 0  # eviction gives the headers' bytes back too


@pytest.mark.parametrize(
    "messages",
    [
        (("k", "v", (("h",),)),),  # a header without its value
        (("k", "v", (("h", 1),)),),  # a value that is not a string
        (("k", "v", ["h", "x"]),),  # headers not a tuple of pairs
        (("k", "v", (), "extra"),),  # a fourth field
    ],
)
def test_malformed_headers_decode_to_nothing(messages: object) -> None:
    assert from_wire(("append", messages, 1, None, None)) is None


def test_a_log_from_before_headers_gives_its_messages_none() -> None:
    """A snapshot taken before headers existed holds ``(key, value, timestamp_ms)``."""
    log = new_log()
    log.append(batch("x"), 3, None, None)
    state = dict(vars(log))
    state["messages"] = {0: (None, "x", 3)}
    restored = PartitionLog.__new__(PartitionLog)
    restored.__setstate__(state)
    assert restored.read(0, 1) == [(0, (None, "x", 3, ()))]
