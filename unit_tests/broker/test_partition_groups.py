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
    GroupDeadLettered,
    GroupReceive,
    GroupSettle,
    Truncate,
    from_wire,
    to_wire,
)
from broker.partition.group_leases import GroupLeased, GroupSettled, Outcome
from broker.partition.log import PartitionLog, Rejected
from broker.partition.raft import FrozenPartitionLog
from protocol.errors import ErrorCode
from protocol.limits import PartitionLimits
from protocol.types import Offset, ReplicaId

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
) -> GroupReceive:
    return GroupReceive(group, n, now_ms, request_id, 500, 3, False)


COMMANDS: list[Command] = [
    GroupReceive("g", 10, 5, "r1", 30_000, 5, True),
    GroupReceive("g", 10, 5, None, 30_000, 0, False),
    GroupSettle("g", "ack", ((3, 1), (4, 2)), 7, 0),
    GroupSettle("g", "nack", (), 7, 1_000),
    GroupDeadLettered("g", (1, 2)),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: type(c).__name__)
def test_group_commands_round_trip_on_the_wire(command: Command) -> None:
    assert from_wire(to_wire(command)) == command


@pytest.mark.parametrize(
    "wire",
    [
        ("group_receive", "g", 10, 5, "r1", 30_000, 5, 1),  # ordered must be a bool
        ("group_receive", "g", True, 5, "r1", 30_000, 5, False),  # a bool is not a count
        ("group_settle", "g", "drop", (), 7, 0),
        ("group_settle", "g", "ack", ((3,),), 7, 0),
        ("group_settle", "g", "ack", [(3, 1)], 7, 0),
        ("group_dead", "g", ("1",)),
        ("group_other", "g"),
    ],
)
def test_malformed_group_commands_decode_to_nothing(wire: tuple[object, ...]) -> None:
    assert from_wire(wire) is None


def test_a_receive_leases_and_an_ack_settles_through_the_log() -> None:
    log = _log()
    leased = log.apply(_receive(n=3))
    assert leased == GroupLeased(((Offset(0), 1), (Offset(1), 1), (Offset(2), 1)))
    acked = log.apply(GroupSettle("g", "ack", ((0, 1), (1, 1), (9, 1)), 1_100, 0))
    assert acked == GroupSettled((Outcome.DONE, Outcome.DONE, Outcome.UNKNOWN))
    assert log.groups.groups["g"].leases.floor == 2


def test_a_repeated_request_id_gets_the_same_leases_and_leases_nothing_more() -> None:
    log = _log()
    first = log.apply(_receive(request_id="r1"))
    assert log.apply(_receive(request_id="r1", now_ms=1_200)) == first
    assert log.groups.groups["g"].leases.in_flight() == 2


def test_leases_expire_in_partition_time_which_never_goes_back() -> None:
    log = _log(1)
    log.apply(_receive(n=1, now_ms=1_000))  # leased until 1,500
    assert log.apply(_receive(n=1, now_ms=1_499)) == GroupLeased(())
    log.apply(GroupSettle("g", "extend", (), 1_600, 0))  # partition time is 1,600 now
    # A proposer whose clock is behind does not move time back: the lease has ended.
    assert log.apply(_receive(n=1, now_ms=900)) == GroupLeased(((Offset(0), 2),))


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
    assert log.apply(_receive(n=5, now_ms=1_100)) == GroupLeased(((Offset(3), 1), (Offset(4), 1)))


def test_dead_letters_settle_once_recorded() -> None:
    log = _log(1)
    for now_ms in (1_000, 2_000, 3_000):  # max_deliveries 3, each lease expires
        log.apply(_receive(n=1, now_ms=now_ms))
    log.apply(_receive(n=1, now_ms=4_000))
    assert log.groups.groups["g"].leases.pending_dead() == [(Offset(0), 3)]
    log.apply(GroupDeadLettered("g", (0,)))
    assert log.groups.groups["g"].leases.floor == 1


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
