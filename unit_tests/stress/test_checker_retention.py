"""The checker with retention (issue 19): replicas read from their log start. What retention
removed below the final log start is legitimately gone (acknowledged or popped there is not
lost; a consumer carried over it to the log start did not skip), and every rule still holds
over ``[log start, end)``: each broken history below fails in exactly its category."""

from __future__ import annotations

from stress_tests.checker import Verdict, check, log_checksum
from stress_tests.history import (
    Entry,
    FinalRead,
    History,
    Outcome,
    Position,
    Read,
    ReplicaLog,
    Send,
)

VALUES = [f"v{i}" for i in range(10)]
START = 6
"""Retention removed v0..v5: the replicas hold [6, 10)."""


def retained(start: int = START, values: list[str] = VALUES) -> tuple[Entry, ...]:
    return tuple(Entry(i, None, values[i], 1000 + i) for i in range(start, len(values)))


def replica(broker_id: int, log: tuple[Entry, ...], start: int = START) -> ReplicaLog:
    end = start + len(log)
    return ReplicaLog(broker_id, 0, log, (log_checksum(log, start, end),), start)


def final(*logs: ReplicaLog) -> FinalRead:
    return FinalRead(logs or tuple(replica(b, retained()) for b in (1, 2, 3)), 1)


def sends() -> tuple[Send, ...]:
    first = Send("p", 1, tuple(VALUES[:5]), Outcome.ACKED, tuple(Position(0, i) for i in range(5)))
    rest = Send(
        "p", 2, tuple(VALUES[5:]), Outcome.ACKED, tuple(Position(0, i) for i in range(5, 10))
    )
    return first, rest


def reads(offsets: list[int]) -> tuple[Read, ...]:
    return tuple(Read("c1", 0, o, VALUES[o]) for o in offsets)


def failing(verdict: Verdict) -> dict[str, int]:
    return {name: n for name, n in verdict.counts.items() if n}


def test_acked_and_popped_below_the_log_start_are_gone_legitimately() -> None:
    history = History(sends(), reads([0, 1, 2, 6, 7, 8, 9]), consumers=("c1",))
    verdict = check(history, final())
    assert verdict.ok, verdict.lines()
    assert verdict.info["acked_retained_away"] == 6


def test_a_consumer_carried_to_the_log_start_did_not_skip() -> None:
    verdict = check(History(sends(), reads([6, 7, 8, 9]), consumers=("c1",)), final())
    assert verdict.ok, verdict.lines()


def test_a_jump_past_the_log_start_is_a_skip() -> None:
    verdict = check(History(sends(), reads([0, 1, 8, 9])), final())
    assert failing(verdict) == {"offset_gap": 1}
    assert "skipped [2, 8)" in verdict.examples["offset_gap"][0]


def test_an_acked_message_missing_above_the_log_start_is_lost() -> None:
    log = tuple(e for e in retained() if e.value != "v8")
    log = tuple(Entry(START + i, e.key, e.value, e.timestamp_ms) for i, e in enumerate(log))
    verdict = check(History(sends(), ()), final(*(replica(b, log) for b in (1, 2, 3))))
    assert verdict.counts["lost"] == 1
    assert "'v8'" in verdict.examples["lost"][0]


def test_a_replica_not_starting_at_its_log_start_has_a_gap() -> None:
    shifted = replica(3, retained(), start=5)  # says 5, holds from 6
    verdict = check(
        History(sends(), ()), final(replica(1, retained()), replica(2, retained()), shifted)
    )
    assert verdict.counts["offset_gap"] == 1


def test_replicas_with_different_log_starts_diverge() -> None:
    shorter = replica(3, retained(start=7), start=7)
    verdict = check(
        History(sends(), ()), final(replica(1, retained()), replica(2, retained()), shorter)
    )
    assert verdict.counts["divergence"] >= 1


def test_a_refused_message_popped_below_the_log_start_still_contradicts_its_refusal() -> None:
    refused = Send("q", 1, ("r0",), Outcome.FAILED)
    history = History((*sends(), refused), (Read("c1", 0, 2, "r0"),))
    verdict = check(history, final())
    assert failing(verdict) == {"failed_but_present": 1}


def test_a_consumer_that_missed_a_retained_message_is_unpopped() -> None:
    history = History(sends(), reads([6, 7, 8]), consumers=("c1",))
    verdict = check(history, final())
    assert failing(verdict) == {"unpopped": 1}
