"""``RecordAccumulator``, the asynchronous producer's pure core: linger, size bounds, memory,
flush marks, order per partition, sticky unkeyed records. No threads, no clock: time is
passed in."""

from __future__ import annotations

import pytest

from protocol.types import NewMessage
from raftq.record_accumulator import RecordAccumulator


def make(
    linger_s: float = 0.01,
    batch_messages_max: int = 3,
    batch_bytes_max: int = 100,
    buffer_bytes_max: int = 1_000,
) -> RecordAccumulator[int]:
    return RecordAccumulator(
        linger_s=linger_s,
        batch_messages_max=batch_messages_max,
        batch_bytes_max=batch_bytes_max,
        buffer_bytes_max=buffer_bytes_max,
    )


def add(
    acc: RecordAccumulator[int], partition: int, token: int, now_s: float = 0.0, size: int = 10
) -> bool:
    return acc.append(partition, NewMessage(value=str(token)), size, now_s, token)


def tokens(acc: RecordAccumulator[int], now_s: float) -> list[tuple[int, list[int]]]:
    return [(b.partition_id, [r.token for r in b.records]) for b in acc.ready(now_s)]


def test_a_batch_waits_for_its_linger_then_leaves() -> None:
    acc = make(linger_s=0.01)
    assert add(acc, 0, 1, now_s=0.0)  # the first record starts a linger: wake the sender
    assert not add(acc, 0, 2, now_s=0.005)
    assert tokens(acc, 0.009) == []
    assert acc.next_due_s() == pytest.approx(0.01)
    assert tokens(acc, 0.01) == [(0, [1, 2])]


def test_a_full_batch_leaves_before_its_linger() -> None:
    acc = make(linger_s=10.0, batch_messages_max=3)
    add(acc, 0, 1)
    add(acc, 0, 2)
    assert add(acc, 0, 3)  # full: wake the sender
    add(acc, 0, 4)
    assert tokens(acc, 0.0) == [(0, [1, 2, 3])]


def test_the_byte_bound_cuts_a_batch_and_an_oversized_record_goes_alone() -> None:
    acc = make(linger_s=0.0, batch_messages_max=100, batch_bytes_max=25)
    add(acc, 0, 1, size=10)
    add(acc, 0, 2, size=10)
    add(acc, 0, 3, size=10)
    taken = acc.ready(0.0)
    assert [[r.token for r in b.records] for b in taken] == [[1, 2]]
    acc.done(taken[0])
    add(acc, 1, 9, size=60)
    assert tokens(acc, 0.0) == [(0, [3]), (1, [9])]


def test_one_batch_in_flight_per_partition_keeps_the_order() -> None:
    acc = make(linger_s=0.0, batch_messages_max=2)
    for token in range(5):
        add(acc, 0, token)
    add(acc, 1, 100)
    first = acc.ready(0.0)
    assert [(b.partition_id, [r.token for r in b.records]) for b in first] == [
        (0, [0, 1]),
        (1, [100]),
    ]
    assert tokens(acc, 1.0) == []  # partition 0 waits for its batch in flight
    acc.done(first[0])
    second = acc.ready(1.0)
    assert [[r.token for r in b.records] for b in second] == [[2, 3]]
    acc.done(second[0])
    assert tokens(acc, 1.0) == [(0, [4])]


def test_the_buffer_counts_bytes_until_done() -> None:
    acc = make(linger_s=0.0, batch_bytes_max=50, buffer_bytes_max=50)
    add(acc, 0, 1, size=30)
    assert acc.has_room(20) and not acc.has_room(21)
    taken = acc.ready(0.0)
    assert not acc.has_room(21)  # in flight still counts
    acc.done(taken[0])
    assert acc.has_room(50) and acc.buffered_bytes == 0 and acc.is_empty


def test_a_flush_sends_without_linger_and_tracks_what_came_before() -> None:
    acc = make(linger_s=60.0)
    add(acc, 0, 1)
    add(acc, 1, 2)
    mark = acc.begin_flush()
    add(acc, 1, 3)  # after the flush began: not waited for
    assert acc.next_due_s() == 0.0
    taken = acc.ready(0.0)
    assert [[r.token for r in b.records] for b in taken] == [[1], [2, 3]]
    assert not acc.flushed(mark)
    acc.done(taken[0])
    assert not acc.flushed(mark)
    acc.done(taken[1])
    assert acc.flushed(mark)
    acc.end_flush()
    add(acc, 0, 4, now_s=1.0)
    assert tokens(acc, 1.0) == []  # lingers again


def test_flush_marks_ignore_later_records() -> None:
    acc = make(linger_s=60.0)
    add(acc, 0, 1)
    mark = acc.begin_flush()
    first = acc.ready(0.0)
    acc.end_flush()
    add(acc, 0, 2)
    acc.done(first[0])
    assert acc.flushed(mark) and not acc.is_empty


def test_closing_sends_everything() -> None:
    acc = make(linger_s=60.0)
    add(acc, 2, 1)
    assert [b.partition_id for b in acc.ready(0.0, closing=True)] == [2]


def test_unkeyed_records_stick_to_a_partition_until_a_batch_leaves_it() -> None:
    acc = make(linger_s=60.0, batch_messages_max=2)
    partition = acc.unkeyed_partition(3)
    add(acc, partition, 1)
    assert acc.unkeyed_partition(3) == partition
    add(acc, partition, 2)
    assert [b.partition_id for b in acc.ready(0.0)] == [partition]
    assert acc.unkeyed_partition(3) == (partition + 1) % 3


@pytest.mark.parametrize(
    "bounds",
    [
        {"linger_s": -1.0},
        {"batch_messages_max": 0},
        {"batch_bytes_max": 0},
        {"batch_bytes_max": 2_000, "buffer_bytes_max": 1_000},
    ],
)
def test_invalid_bounds_are_refused(bounds: dict[str, float]) -> None:
    arguments: dict[str, float] = {
        "linger_s": 0.0,
        "batch_messages_max": 1,
        "batch_bytes_max": 10,
        "buffer_bytes_max": 10,
    }
    arguments.update(bounds)
    with pytest.raises(ValueError):
        RecordAccumulator(
            linger_s=arguments["linger_s"],
            batch_messages_max=int(arguments["batch_messages_max"]),
            batch_bytes_max=int(arguments["batch_bytes_max"]),
            buffer_bytes_max=int(arguments["buffer_bytes_max"]),
        )


def test_drain_takes_every_queued_record_but_not_those_in_flight() -> None:
    acc = make(linger_s=0.0, batch_messages_max=1)
    add(acc, 0, 1)
    add(acc, 0, 2)
    add(acc, 1, 3)
    in_flight = acc.ready(0.0)
    assert [r.token for b in in_flight for r in b.records] == [1, 3]
    assert [r.token for r in acc.drain()] == [2]
    assert acc.ready(0.0) == [] and acc.next_due_s() is None
