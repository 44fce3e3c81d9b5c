"""The membership run's checks on synthetic states (issue 19): a settled cluster passes, and
each broken state fails in exactly its category: a move left unfinished, a partition that
takes no write, replicas whose databases differ, an ack of a min-insync topic held by too
few replicas, a drain refused that had to be taken and one taken that had to be refused."""

from __future__ import annotations

from typing import Any

from stress_tests.history import History, Outcome, Position, RangeSum, ReplicaLog, Send
from stress_tests.membership_checks import (
    CANNOT_MOVE,
    MEMBERSHIP_MUST_BE_ZERO,
    BrokerState,
    ClusterState,
    MembershipVerdict,
    PartitionState,
    WriteProbe,
    check_drains,
    check_insync_acks,
    check_moves_finished,
    check_replica_databases,
    check_writable,
    drain_attempt,
    drainable,
    parse_overview,
)

FACTORS = {"t3": 3, "t1": 1}


def brokers(dead: tuple[int, ...] = (), draining: tuple[int, ...] = ()) -> dict[int, BrokerState]:
    return {b: BrokerState(b not in dead, b in draining) for b in (1, 2, 3, 4, 5)}


def settled(**changes: Any) -> ClusterState:
    partitions = (
        PartitionState("t3", 0, "active", (1, 2, 3), False),
        PartitionState("t3", 1, "active", (2, 3, 4), False),
        PartitionState("t1", 0, "active", (5,), False),
    )
    return ClusterState(changes.get("brokers", brokers()), changes.get("partitions", partitions))


def flagged(verdict: MembershipVerdict) -> dict[str, int]:
    return {name: n for name, n in verdict.counts.items() if n}


def moves(state: ClusterState) -> dict[str, int]:
    verdict = MembershipVerdict()
    check_moves_finished(state, FACTORS, verdict)
    return flagged(verdict)


def test_a_settled_cluster_passes_every_check() -> None:
    verdict = MembershipVerdict()
    check_moves_finished(settled(), FACTORS, verdict)
    check_writable([WriteProbe("t3", 0, True, 0.4)], 30.0, verdict)
    assert verdict.ok and set(verdict.counts) == set(MEMBERSHIP_MUST_BE_ZERO)
    assert all("must be 0" in line for line in verdict.lines())


def test_a_partition_still_moving_is_an_unfinished_move() -> None:
    parts = settled().partitions
    moving = (PartitionState("t3", 0, "active", (1, 2, 4), True), *parts[1:])
    assert moves(settled(partitions=moving)) == {"unfinished_move": 1}


def test_a_replica_left_on_a_dead_draining_or_removed_broker_is_an_unfinished_move() -> None:
    assert moves(settled(brokers=brokers(dead=(1,)))) == {"unfinished_move": 1}
    assert moves(settled(brokers=brokers(draining=(4,)))) == {"unfinished_move": 1}
    removed = {b: s for b, s in brokers().items() if b != 5}
    assert moves(settled(brokers=removed)) == {"unfinished_move": 1}


def test_too_few_replicas_or_a_partition_not_active_is_an_unfinished_move() -> None:
    parts = settled().partitions
    short = (PartitionState("t3", 0, "active", (1, 2), False), *parts[1:])
    assert moves(settled(partitions=short)) == {"unfinished_move": 1}
    creating = (PartitionState("t3", 0, "creating", (1, 2, 3), False), *parts[1:])
    assert moves(settled(partitions=creating)) == {"unfinished_move": 1}


def test_another_runs_topics_are_not_judged() -> None:
    other = (*settled().partitions, PartitionState("old", 0, "active", (9,), True))
    assert moves(settled(partitions=other)) == {}


def test_a_probe_not_acknowledged_or_acknowledged_late_is_unwritable() -> None:
    verdict = MembershipVerdict()
    check_writable(
        [
            WriteProbe("t3", 0, False, 30.1, "503 NO_LEADER"),
            WriteProbe("t3", 1, True, 31.0),
            WriteProbe("t3", 2, True, 2.0),
        ],
        30.0,
        verdict,
    )
    assert flagged(verdict) == {"unwritable": 2}
    assert "503 NO_LEADER" in verdict.examples["unwritable"][0]


def replicas(*sums: tuple[int, int, str], start: int = 0, rows: int = 10) -> list[ReplicaLog]:
    """One replica per (broker, count, sha) over [start, start + rows)."""
    return [
        ReplicaLog(broker, 0, (), (RangeSum(start, start + rows, count, sha),), start)
        for broker, count, sha in sums
    ]


def databases(group: list[ReplicaLog], factor: int = 3) -> dict[str, int]:
    verdict = MembershipVerdict()
    check_replica_databases("t3", group, factor, verdict)
    return flagged(verdict)


def test_identical_replica_databases_pass() -> None:
    assert databases(replicas((1, 10, "a"), (2, 10, "a"), (3, 10, "a"))) == {}


def test_a_replica_database_that_differs_is_a_mismatch() -> None:
    assert databases(replicas((1, 10, "a"), (2, 10, "b"), (3, 10, "a"))) == {"replica_mismatch": 1}


def test_a_row_missing_from_every_replica_is_a_mismatch() -> None:
    group = replicas((1, 9, "a"), (2, 9, "a"), (3, 9, "a"))
    assert databases(group) == {"replica_mismatch": 3}


def test_replicas_with_other_log_starts_or_too_few_replicas_are_a_mismatch() -> None:
    group = [*replicas((1, 10, "a"), (2, 10, "a")), *replicas((3, 10, "a"), start=4)]
    assert databases(group) == {"replica_mismatch": 1}
    assert databases(replicas((1, 10, "a"), (2, 10, "a"))) == {"replica_mismatch": 1}


def acked(synced: int | None, outcome: Outcome = Outcome.ACKED) -> Send:
    positions = (Position(0, 0),) if outcome is Outcome.ACKED else ()
    return Send("p", 1, ("v",), outcome, positions, replicas_synced=synced)


def insync(*sends: Send) -> dict[str, int]:
    verdict = MembershipVerdict()
    check_insync_acks("strict", History(sends, ()), 3, verdict)
    return flagged(verdict)


def test_an_ack_held_by_fewer_replicas_than_min_insync_is_short() -> None:
    assert insync(acked(3), acked(2)) == {"insync_ack_short": 1}


def test_an_ack_that_does_not_say_how_many_hold_it_is_short() -> None:
    assert insync(acked(None)) == {"insync_ack_short": 1}


def test_refused_and_unknown_sends_are_not_acks() -> None:
    assert insync(acked(3), acked(None, Outcome.FAILED), acked(None, Outcome.UNKNOWN)) == {}


def drains(state: ClusterState, broker_id: int, status: int, code: int | None) -> dict[str, int]:
    verdict = MembershipVerdict()
    check_drains([drain_attempt(state, broker_id, status, code)], verdict)
    return flagged(verdict)


def test_a_drain_refused_for_a_broker_that_could_be_drained_is_wrong() -> None:
    assert drainable(settled(), 1)
    assert drains(settled(), 1, 409, CANNOT_MOVE) == {"drain_wrongly_refused": 1}
    assert drains(settled(), 1, 202, None) == {}


def test_a_drain_taken_for_the_holder_of_a_lone_replica_is_wrong() -> None:
    assert not drainable(settled(), 5)
    assert drains(settled(), 5, 202, None) == {"drain_wrongly_taken": 1}
    assert drains(settled(), 5, 409, CANNOT_MOVE) == {}


def test_a_refusal_is_right_while_a_broker_is_dead_or_no_broker_can_take_a_replica() -> None:
    dead = settled(brokers=brokers(dead=(4,)))
    assert not drainable(dead, 1)
    assert drains(dead, 1, 409, CANNOT_MOVE) == {}
    crowded = settled(brokers={b: BrokerState(True, False) for b in (1, 2, 3, 4)})
    # broker 1 holds t3/0 on (1, 2, 3): only 4 could take it; 4 draining leaves none
    draining = settled(brokers={**crowded.brokers, 4: BrokerState(True, True)})
    assert drainable(crowded, 1)
    assert not drainable(draining, 1)
    assert drains(draining, 1, 409, CANNOT_MOVE) == {}


def test_the_overview_answer_is_parsed() -> None:
    body = {
        "managers": [],
        "topics": [],
        "brokers": [
            {"broker_id": 1, "address": "a", "alive": True, "partitions": 1, "draining": False},
            {"broker_id": 2, "address": "b", "alive": False, "partitions": 1, "draining": True},
        ],
        "partitions": [
            {
                "topic": "t",
                "partition_id": 0,
                "state": "active",
                "leader": 1,
                "end_offset": 5,
                "log_start_offset": 0,
                "replicas": [
                    {"broker_id": 1, "alive": True, "is_leader": True, "flushed_offset": 5},
                    {"broker_id": 2, "alive": False, "is_leader": False, "flushed_offset": 3},
                ],
                "moving": {"replica_id": 1, "from_broker_id": 2, "to_broker_id": 1},
            }
        ],
    }
    state = parse_overview(body)
    assert state.brokers == {1: BrokerState(True, False), 2: BrokerState(False, True)}
    assert state.partitions == (PartitionState("t", 0, "active", (1, 2), True),)
    assert [p.partition_id for p in state.held_by(2)] == [0]
