"""Consumer groups in the partition's replicated state (issue 20): the group commands'
wire form, their apply through ``PartitionLog`` (partition time, request-id repeats,
bounds, retention) and snapshots with and without groups."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from broker.partition.commands import (
    Append,
    Command,
    DeadLettered,
    Receive,
    Redrive,
    Settle,
    Truncate,
    from_wire,
    to_wire,
)
from broker.partition.group_leases import DeadLetter, Leased, Redriven, Settled
from broker.partition.log import PartitionLog, Rejected
from broker.partition.raft import FrozenPartitionLog, partition_twin
from broker.partition.replica import PartitionReplica
from protocol.errors import ErrorCode, RaftQError
from protocol.group_requests import Outcome
from protocol.limits import Limits, PartitionLimits
from protocol.types import BrokerId, Offset, PartitionId, ReplicaAddress, ReplicaId, ReplicaSpec

LIMITS = PartitionLimits(
    unflushed_messages_max=1_000,
    unflushed_bytes_max=100_000,
    replica_lag_messages_max=100,
    producers_max=10,
    sequences_remembered=4,
    consumers_max=10,
    groups_max=2,
)


def _log(messages: int = 5) -> PartitionLog:
    log = PartitionLog(3, LIMITS)
    log.apply(Append(tuple((None, f"m{i}") for i in range(messages)), 1_000, None, None))
    return log


def _receive(
    group: str = "g", n: int = 2, now_ms: int = 1_000, request_id: str | None = None
) -> Receive:
    return Receive(group, n, now_ms, request_id, 500, 3, False)


COMMANDS: list[Command] = [
    Receive("g", 10, 5, "r1", 30_000, 5, True),
    Receive("g", 10, 5, None, 30_000, 0, False),
    Settle("g", "ack", ((3, 1), (4, 2)), 7, 0),
    Settle("g", "nack", (), 7, 1_000),
    DeadLettered("g", (1, 2)),
    Redrive("g", "r", 9, 100, ((1, 3, "k"), (2, 3, None))),
    Redrive("g", None, 9, 100),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_group_commands_round_trip_on_the_wire(command: Command) -> None:
    assert from_wire(to_wire(command)) == command


@pytest.mark.parametrize(
    "wire",
    [
        ("receive", "g", 10, 5, "r1", 30_000, 5, 1),  # ordered must be a bool
        ("receive", "g", True, 5, "r1", 30_000, 5, False),  # a bool is not a count
        ("settle", "g", "drop", (), 7, 0),
        ("settle", "g", "ack", ((3,),), 7, 0),
        ("settle", "g", "ack", [(3, 1)], 7, 0),
        ("dead_lettered", "g", ("1",)),
        ("receive", "g"),
        ("dead_lettered", "g", (1,), 2),
        ("redrive", "g", "r", 9, 100, ((1, 3),)),
        ("redrive", "g", "r", 9, 100, ((1, 3, 4),)),
        ("redrive", "g", 7, 9, 100, ()),
        ("redrive", "g", "r", 9, 100),
    ],
)
def test_malformed_group_commands_decode_to_nothing(wire: tuple[object, ...]) -> None:
    assert from_wire(wire) is None


def test_a_receive_leases_and_an_ack_settles_through_the_log() -> None:
    log = _log()
    leased = log.apply(_receive(n=3))
    assert leased == Leased(((Offset(0), 1), (Offset(1), 1), (Offset(2), 1)))
    acked = log.apply(Settle("g", "ack", ((0, 1), (1, 1), (9, 1)), 1_100, 0))
    assert acked == Settled((Outcome.DONE, Outcome.DONE, Outcome.UNKNOWN))
    assert log.groups.groups["g"].leases.floor == 2


def test_a_repeated_request_id_gets_the_same_leases_and_leases_nothing_more() -> None:
    log = _log()
    first = log.apply(_receive(request_id="r1"))
    assert log.apply(_receive(request_id="r1", now_ms=1_200)) == first
    assert log.groups.groups["g"].leases.in_flight() == 2


def test_an_empty_answer_is_not_remembered_so_its_repeat_gets_what_came_since() -> None:
    """A long poll asks again with the same request id; had the empty answer been
    remembered, the repeat would answer it for as long as the id is remembered."""
    log = _log(0)
    assert log.apply(_receive(request_id="r1")) == Leased(())
    log.apply(Append(((None, "late"),), 1_100, None, None))
    assert log.apply(_receive(request_id="r1", now_ms=1_100)) == Leased(((Offset(0), 1),))


def test_leases_expire_in_partition_time_which_never_goes_back() -> None:
    log = _log(1)
    log.apply(_receive(n=1, now_ms=1_000))  # leased until 1,500
    assert log.apply(_receive(n=1, now_ms=1_499)) == Leased(())
    log.apply(Settle("g", "extend", (), 1_600, 0))  # partition time is 1,600 now
    # A proposer whose clock is behind does not move time back: the lease has ended.
    assert log.apply(_receive(n=1, now_ms=900)) == Leased(((Offset(0), 2),))


def test_a_group_past_groups_max_is_refused_and_nothing_changes() -> None:
    log = _log()
    log.apply(_receive("a"))
    log.apply(_receive("b"))
    refused = log.apply(_receive("c"))
    assert isinstance(refused, Rejected) and refused.code == ErrorCode.TOO_MANY
    assert sorted(log.groups.groups) == ["a", "b"]


def test_a_receive_without_room_or_time_is_invalid() -> None:
    log = _log()
    invalid = (replace(_receive(), max_messages=0), replace(_receive(), visibility_timeout_ms=0))
    for command in invalid:
        result = log.apply(command)
        assert isinstance(result, Rejected) and result.code == ErrorCode.INVALID_FIELD
    assert not log.groups.groups


def test_retention_skips_what_the_groups_had_not_settled() -> None:
    log = _log()
    log.apply(_receive(n=2))
    for replica in range(3):
        log.mark_flushed(ReplicaId(replica), 5)
    log.apply(Truncate(Offset(3)))
    leases = log.groups.groups["g"].leases
    assert leases.floor == 3 and leases.in_flight() == 0
    assert log.apply(_receive(n=5, now_ms=1_100)) == Leased(((Offset(3), 1), (Offset(4), 1)))


def test_dead_letters_settle_once_recorded() -> None:
    log = _log(1)
    for now_ms in (1_000, 2_000, 3_000):  # max_deliveries 3, each lease expires
        log.apply(_receive(n=1, now_ms=now_ms))
    log.apply(_receive(n=1, now_ms=4_000))
    assert log.groups.pending_dead(10) == [("g", DeadLetter(Offset(0), 3, sequence=1))]
    log.apply(DeadLettered("g", (0,)))
    assert log.groups.groups["g"].leases.floor == 1


def _dead(log: PartitionLog, messages: int) -> None:
    """Every message of ``log`` (``messages`` of them) dies: three leases expire."""
    for now_ms in (1_000, 2_000, 3_000):  # max_deliveries 3, each lease expires
        log.apply(_receive(n=messages, now_ms=now_ms))
    log.apply(_receive(n=messages, now_ms=4_000))
    assert len(log.groups.pending_dead(10)) == messages


def test_a_redrive_is_done_once_per_request_id() -> None:
    log = _log(2)
    _dead(log, 2)
    assert log.apply(Redrive("g", "r1", 5_000, 1)) == Redriven(1)
    assert log.apply(Redrive("g", "r1", 5_001, 1)) == Redriven(1)  # a repeat: nothing more
    assert len(log.groups.pending_dead(10)) == 1
    assert log.apply(_receive(n=5, now_ms=5_002)) == Leased(((Offset(0), 4),))
    log.apply(DeadLettered("g", (1,)))
    letters = ((1, 3, None), (0, 4, None))  # 0 is leased: left as it is
    assert log.apply(Redrive("g", "r2", 5_003, 10, letters)) == Redriven(1)
    assert log.apply(Redrive("g", "r2", 5_004, 10, letters)) == Redriven(1)
    assert log.apply(_receive(n=5, now_ms=5_005)) == Leased(((Offset(1), 4),))
    assert log.apply(Redrive("nobody", "r3", 5_006, 10)) == Redriven(0)


def test_snapshots_keep_the_groups_and_an_older_one_has_none() -> None:
    log = _log()
    log.apply(_receive(request_id="r1"))
    restored = pickle.loads(pickle.dumps(log))
    assert restored.__dict__ == log.__dict__
    thawed = pickle.loads(pickle.dumps(FrozenPartitionLog(log, chunk_messages=2)))
    assert thawed.__dict__ == log.__dict__
    older = dict(vars(log))
    del older["groups"]  # a snapshot written before consumer groups existed
    from_old = PartitionLog.__new__(PartitionLog)
    from_old.__setstate__(older)
    assert from_old.groups.groups == {}


def test_the_replica_proposes_group_commands_through_the_wire_and_types_the_answers() -> None:
    """``PartitionReplica.receive`` and ``settle`` go through group commit and the wire
    form (``partition_twin``); a refusal becomes a ``RaftQError`` with its code."""
    address = ReplicaAddress(ReplicaId(0), BrokerId(1), "http://b1", "127.0.0.1:9100")
    spec = ReplicaSpec("t", PartitionId(0), ReplicaId(0), (address,), LIMITS)
    replica = PartitionReplica(spec, partition_twin("t/0", 1, LIMITS), Limits())
    replica.append([(None, "a"), (None, "b")], 1_000, None, None)
    leased = replica.receive(_receive(n=5))
    assert leased == Leased(((Offset(0), 1), (Offset(1), 1)))
    assert replica.settle(Settle("g", "ack", ((0, 1),), 1_001, 0)) == Settled((Outcome.DONE,))
    replica.receive(_receive("h"))
    with pytest.raises(RaftQError) as refused:
        replica.receive(_receive("i"))  # groups_max is 2
    assert refused.value.code == ErrorCode.TOO_MANY
