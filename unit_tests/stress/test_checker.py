"""The checker on synthetic histories: a clean run passes, and each kind of broken build
(acking before the commit loses a message, a retry duplicates one, a phantom, a reordering,
an offset that moved, diverging replicas, a popped message that vanished, a late copy of an
unknown batch, a consumer that stopped short) makes it fail in exactly its category."""

from __future__ import annotations

import dataclasses

from broker.persistence.store import range_checksum
from protocol.types import Offset, StoredMessage
from stress_tests.checker import MUST_BE_ZERO, Verdict, check, log_checksum
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


def entries(values: list[str]) -> tuple[Entry, ...]:
    return tuple(Entry(i, None, v, 1000 + i) for i, v in enumerate(values))


def replicas(log: tuple[Entry, ...], partition_id: int = 0) -> tuple[ReplicaLog, ...]:
    sums = (log_checksum(log, 0, len(log)),)
    return tuple(ReplicaLog(b, partition_id, log, sums) for b in (1, 2, 3))


def acked(producer: str, sequence: int, values: list[str], first: int) -> Send:
    positions = tuple(Position(0, first + i) for i in range(len(values)))
    return Send(producer, sequence, tuple(values), Outcome.ACKED, positions)


def clean() -> tuple[History, FinalRead]:
    sends = (acked("p", 1, ["a", "b"], 0), acked("p", 2, ["c"], 2))
    reads = tuple(Read("c1", 0, i, v) for i, v in enumerate(["a", "b", "c"]))
    return History(sends, reads), FinalRead(replicas(entries(["a", "b", "c"])), 1)


def failing(verdict: Verdict) -> dict[str, int]:
    return {name: n for name, n in verdict.counts.items() if n}


def test_a_clean_history_passes_with_every_category_at_zero() -> None:
    verdict = check(*clean())
    assert verdict.ok, verdict.lines()
    assert set(verdict.counts) == set(MUST_BE_ZERO)
    assert verdict.info["sent_acked"] == 3
    assert any("must be 0" in line for line in verdict.lines())


def test_an_acknowledged_message_missing_from_the_log_is_lost() -> None:
    history, _ = clean()  # acked before commit: the log never got "c"
    verdict = check(history, FinalRead(replicas(entries(["a", "b"])), 1))
    assert failing(verdict) == {"lost": 1}
    assert not verdict.ok


def test_a_retried_batch_stored_twice_is_a_duplicate() -> None:
    history, _ = clean()
    verdict = check(history, FinalRead(replicas(entries(["a", "b", "c", "c"])), 1))
    assert failing(verdict) == {"duplicate": 1}


def test_a_popped_message_seen_twice_by_one_consumer_is_a_duplicate() -> None:
    history, final = clean()
    twice = History(history.sends, (*history.reads, Read("c1", 0, 2, "c")))
    assert failing(check(twice, final)).get("duplicate") == 1


def test_a_message_never_sent_is_a_phantom() -> None:
    history, _ = clean()
    verdict = check(history, FinalRead(replicas(entries(["a", "b", "c", "ghost"])), 1))
    assert failing(verdict) == {"phantom": 1}


def test_a_failed_send_that_was_stored_anyway_is_flagged() -> None:
    history, final = clean()
    refused = Send("p", 3, ("c",), Outcome.FAILED)
    verdict = check(History((history.sends[0], refused), history.reads), final)
    assert failing(verdict) == {"failed_but_present": 1}


def test_an_unknown_outcome_may_appear_once_or_not_at_all() -> None:
    history, final = clean()
    unknown = (history.sends[0], Send("p", 2, ("c",), Outcome.UNKNOWN))
    assert check(History(unknown, history.reads), final).ok
    absent = (history.sends[0], Send("p", 2, ("zz",), Outcome.UNKNOWN))
    verdict = check(History(absent, ()), final)
    assert failing(verdict) == {"phantom": 1}  # "c" now has no sender


def test_a_later_batch_at_a_lower_offset_is_a_reordering() -> None:
    sends = (acked("p", 1, ["b"], 1), acked("p", 2, ["a"], 0))
    final = FinalRead(replicas(entries(["a", "b"])), 1)
    assert failing(check(History(sends, ()), final)) == {"order_violation": 1}


def test_a_consumer_going_backwards_or_skipping_is_flagged() -> None:
    history, final = clean()
    backwards = (Read("c1", 0, 1, "b"), Read("c1", 0, 0, "a"))
    assert "order_violation" in failing(check(History(history.sends, backwards), final))
    skipping = (Read("c1", 0, 0, "a"), Read("c1", 0, 2, "c"))
    assert failing(check(History(history.sends, skipping), final)) == {"offset_gap": 1}


def test_acknowledged_at_one_offset_and_stored_at_another_is_a_mismatch() -> None:
    history, _ = clean()
    verdict = check(history, FinalRead(replicas(entries(["b", "a", "c"])), 1))
    assert failing(verdict) == {"offset_mismatch": 4}  # two acks and two pops


def test_a_replica_log_with_a_hole_is_an_offset_gap_and_divergence() -> None:
    history, _ = clean()
    full = entries(["a", "b", "c"])
    holed = (full[0], full[2])
    logs = (*replicas(full)[:2], ReplicaLog(3, 0, holed, (log_checksum(holed, 0, 3),)))
    verdict = check(history, FinalRead(logs, 1))
    assert failing(verdict) == {"offset_gap": 1, "divergence": 2}


def test_replicas_that_differ_at_an_offset_diverge() -> None:
    history, _ = clean()
    good = replicas(entries(["a", "b", "c"]))
    other = (*entries(["a", "b", "c"])[:2], Entry(2, None, "c", 9999))
    bad = ReplicaLog(3, 0, other, (log_checksum(other, 0, 3),))
    assert failing(check(history, FinalRead((*good[:2], bad), 1))) == {"divergence": 1}


def test_a_database_that_differs_from_its_replica_log_diverges() -> None:
    history, final = clean()
    stale = dataclasses.replace(final.replicas[0].db_sums[0], count=2, sha256="0" * 64)
    broken = dataclasses.replace(final.replicas[0], db_sums=(stale,))
    verdict = check(history, FinalRead((broken, *final.replicas[1:]), 1))
    assert failing(verdict) == {"divergence": 1}


def test_the_checksum_matches_the_brokers_layout() -> None:
    log = (Entry(0, None, "a", 5), Entry(1, "k", "b", 6))
    stored = [
        StoredMessage(
            offset=Offset(e.offset), value=e.value, key=e.key, timestamp_ms=e.timestamp_ms
        )
        for e in log
    ]
    expected = range_checksum(0, 2, stored)
    assert log_checksum(log, 0, 2).sha256 == expected.sha256


def popped_by(consumer: str, log: list[tuple[int, str]]) -> tuple[Read, ...]:
    """``consumer`` popping ``(partition, value)`` pairs, each partition from offset 0."""
    next_offset: dict[int, int] = {}
    reads = []
    for partition_id, value in log:
        offset = next_offset.get(partition_id, 0)
        next_offset[partition_id] = offset + 1
        reads.append(Read(consumer, partition_id, offset, value))
    return tuple(reads)


def test_every_outcome_with_consumers_held_to_the_end_passes() -> None:
    """Two partitions; acked, stored and absent unknown, refused, and a batch acked in part
    (the rest given up); two consumers drained to the end."""
    sends = (
        acked("p", 1, ["a"], 0),
        Send("p", 2, ("b",), Outcome.UNKNOWN),
        Send("p", 3, ("x",), Outcome.FAILED),
        Send("p", 4, ("y",), Outcome.UNKNOWN),
        Send("q", 1, ("c",), Outcome.ACKED, (Position(1, 0),)),
        Send("q", 2, ("d",), Outcome.ACKED, (Position(1, 1),)),
        Send("q", 2, ("e",), Outcome.UNKNOWN),
    )
    stored = [(0, "a"), (0, "b"), (1, "c"), (1, "d")]
    reads = popped_by("c1", stored) + popped_by("c2", stored[2:] + stored[:2])
    final = FinalRead(
        replicas(entries(["a", "b"]), 0) + replicas(entries(["c", "d"]), 1), partition_count=2
    )
    verdict = check(History(sends, reads, consumers=("c1", "c2")), final)
    assert verdict.ok, verdict.lines()
    assert verdict.info["unknown_present"] == 1
    assert verdict.info["consumers_held_to_the_end"] == 2


def test_a_consumer_that_stopped_short_of_the_end_leaves_messages_unpopped() -> None:
    history, final = clean()  # a claimed range never delivered at the tail: "c"
    short = History(history.sends, history.reads[:2], consumers=("c1",))
    verdict = check(short, final)
    assert failing(verdict) == {"unpopped": 1}
    assert "c1 partition 0: 1 of 3" in verdict.examples["unpopped"][0]


def test_a_consumer_wedged_by_refusals_from_the_start_pops_nothing() -> None:
    history, final = clean()  # c2 ran to the end, every pop refused
    wedged = History(history.sends, history.reads, consumers=("c1", "c2"))
    assert failing(check(wedged, final)) == {"unpopped": 3}


def test_a_consumer_not_held_to_the_end_may_stop_short() -> None:
    history, final = clean()  # e.g. a consumer whose thread hung: the runner fails the run
    assert check(History(history.sends, history.reads[:2]), final).ok


def test_a_popped_message_of_an_unknown_send_that_vanished_is_lost() -> None:
    history, _ = clean()  # popped, so committed; then gone from every replica
    unknown = (history.sends[0], Send("p", 2, ("c",), Outcome.UNKNOWN))
    verdict = check(History(unknown, history.reads), FinalRead(replicas(entries(["a", "b"])), 1))
    assert failing(verdict) == {"lost": 1}
    assert "(unknown) popped by c1 at" in verdict.examples["lost"][0]


def test_a_popped_message_of_a_refused_send_that_vanished_is_lost_and_contradicts_it() -> None:
    history, _ = clean()
    refused = (history.sends[0], Send("p", 2, ("c",), Outcome.FAILED))
    verdict = check(History(refused, history.reads), FinalRead(replicas(entries(["a", "b"])), 1))
    assert failing(verdict) == {"lost": 1, "failed_but_present": 1}


def test_a_vanished_message_popped_by_two_consumers_is_lost_once() -> None:
    history, _ = clean()
    unknown = (history.sends[0], Send("p", 2, ("c",), Outcome.UNKNOWN))
    reads = (*history.reads, *popped_by("c2", [(0, "a"), (0, "b"), (0, "c")]))
    verdict = check(History(unknown, reads), FinalRead(replicas(entries(["a", "b"])), 1))
    assert failing(verdict) == {"lost": 1}


def test_a_late_copy_of_an_older_unknown_batch_stored_after_a_newer_one_is_a_reordering() -> None:
    final = FinalRead(replicas(entries(["b", "a"])), 1)
    late_unknown = (Send("p", 1, ("a",), Outcome.UNKNOWN), acked("p", 2, ["b"], 0))
    assert failing(check(History(late_unknown, ()), final)) == {"order_violation": 1}
    newer_unknown_first = (acked("p", 1, ["a"], 1), Send("p", 2, ("b",), Outcome.UNKNOWN))
    assert failing(check(History(newer_unknown_first, ()), final)) == {"order_violation": 1}
    both_unknown = (Send("p", 1, ("a",), Outcome.UNKNOWN), Send("p", 2, ("b",), Outcome.UNKNOWN))
    assert failing(check(History(both_unknown, ()), final)) == {"order_violation": 1}


def test_unknown_batches_stored_in_order_around_absent_ones_pass() -> None:
    final = FinalRead(replicas(entries(["a", "c"])), 1)
    sends = (
        Send("p", 1, ("a",), Outcome.UNKNOWN),
        Send("p", 2, ("b",), Outcome.UNKNOWN),  # never stored: no position to order
        acked("p", 3, ["c"], 1),
    )
    assert check(History(sends, ()), final).ok
