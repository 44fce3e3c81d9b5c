"""The workers without a cluster: a producer records the offsets the client acknowledged
before a failure (``ProduceError.completed``) as acked, so losing them is visible to the
checker; the drain reports every consumer it could not bring up to date, instead of stopping
silently at its deadline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from raftq import ClientLimits, ProduceError
from raftq.records import PartitionOffset
from stress_tests.checker import check
from stress_tests.history import Entry, FinalRead, History, Outcome, Position, Recorder, ReplicaLog
from stress_tests.workload import CAUGHT_UP_EMPTY_POPS, ProducerWorker, pop_until_caught_up


@dataclass
class PartlyFailingProducer:
    """Acknowledges the first ``completed`` messages of the first batch, then fails with the
    rest retained (as ``raftq.Producer`` does when a later batch of one call fails); its
    ``flush`` then acknowledges the rest at ``rest_at``."""

    completed: tuple[PartitionOffset, ...]
    rest_at: list[PartitionOffset]
    sent: list[str] = field(default_factory=list)
    acked_in_batch: tuple[PartitionOffset | None, ...] = ()

    def produce_batch(self, messages: Iterable[tuple[str, str | None]]) -> list[PartitionOffset]:
        self.sent += [value for value, _ in messages]
        raise ProduceError(
            "second batch not acknowledged",
            completed=self.completed,
            retained=True,
            outcome_unknown=True,
            acked_in_batch=self.acked_in_batch,
        )

    def flush(self) -> list[PartitionOffset]:
        return self.rest_at

    def close(self) -> None:
        pass


def worker(recorder: Recorder, client: PartlyFailingProducer) -> ProducerWorker:
    return ProducerWorker(
        "p",
        "http://unused",
        "t",
        recorder,
        api_key="unused",
        batch_messages=3,
        limits=ClientLimits(),
        give_up_s=90.0,
        connect=lambda _first_sequence: client,
    )


def test_messages_acknowledged_before_a_failure_are_recorded_as_acked() -> None:
    recorder = Recorder()
    client = PartlyFailingProducer((PartitionOffset(0, 7),), [PartitionOffset(1, 2)] * 2)
    producer = worker(recorder, client)
    assert not producer.step()
    assert producer.step()
    sends = recorder.snapshot().sends
    assert [(s.values, s.outcome, s.positions) for s in sends] == [
        (("p/0",), Outcome.ACKED, (Position(0, 7),)),
        (("p/1", "p/2"), Outcome.ACKED, (Position(1, 2), Position(1, 2))),
    ]
    assert {s.sequence for s in sends} == {1}
    assert producer.acked_messages == 3


def test_a_batch_given_up_keeps_its_acknowledged_part_so_losing_it_is_seen() -> None:
    recorder = Recorder()
    producer = worker(recorder, PartlyFailingProducer((PartitionOffset(0, 0),), []))
    producer.step()
    producer.give_up()
    history = recorder.snapshot()
    assert [(s.values, s.outcome) for s in history.sends] == [
        (("p/0",), Outcome.ACKED),
        (("p/1", "p/2"), Outcome.UNKNOWN),
    ]
    kept = FinalRead(replicas_of(0, ("p/0",)) + replicas_of(1, ("p/1",)), 2)
    assert check(history, kept).ok
    gone = FinalRead(replicas_of(0, ()) + replicas_of(1, ("p/1",)), 2)  # the acked group
    verdict = check(history, gone)
    assert {name: n for name, n in verdict.counts.items() if n} == {"lost": 1}


def test_a_batch_given_up_keeps_its_groups_acknowledged_on_the_direct_path() -> None:
    """The direct path sends a batch's partition groups apart: one acknowledged, another
    failed, the batch given up. The acknowledged group's values are acked in the history
    (before, the whole batch was UNKNOWN, so losing that group went unseen)."""
    recorder = Recorder()
    client = PartlyFailingProducer((), [], acked_in_batch=(None, PartitionOffset(1, 0), None))
    producer = worker(recorder, client)
    producer.step()
    producer.give_up()
    history = recorder.snapshot()
    assert [(s.values, s.outcome) for s in history.sends] == [
        (("p/1",), Outcome.ACKED),
        (("p/0", "p/2"), Outcome.UNKNOWN),
    ]
    gone = FinalRead(replicas_of(0, ("p/0",)) + replicas_of(1, ()), 2)
    verdict = check(history, gone)
    assert {name: n for name, n in verdict.counts.items() if n} == {"lost": 1}


def replicas_of(partition_id: int, values: tuple[str, ...]) -> tuple[ReplicaLog, ...]:
    log = tuple(Entry(i, None, v, 1) for i, v in enumerate(values))
    return tuple(ReplicaLog(b, partition_id, log, ()) for b in (1, 2, 3))


@dataclass
class ScriptedConsumer:
    """Answers each pop from ``script`` (messages, or -1 for an error), then pops nothing."""

    name: str
    script: list[int]
    clock: list[float]
    errors: int = 0
    last_error: str = ""
    closed: bool = False

    def step(self) -> int:
        self.clock[0] += 1.0  # each pop takes a second of the drain's time
        answer = self.script.pop(0) if self.script else 0
        if answer < 0:
            self.errors += 1
            self.last_error = "503 REFUSED"
        return answer

    def close(self) -> None:
        self.closed = True


def drain(
    script: Sequence[Sequence[int]], drain_s: float = 30.0, idle_s_min: float = 0.0
) -> list[str]:
    clock = [0.0]
    consumers = [ScriptedConsumer(f"c{i}", list(s), clock) for i, s in enumerate(script)]
    behind = pop_until_caught_up(consumers, drain_s, clock=lambda: clock[0], idle_s_min=idle_s_min)
    assert all(c.closed for c in consumers)
    return behind


def test_consumers_that_recover_from_errors_and_then_pop_nothing_twice_are_caught_up() -> None:
    assert drain([[-1, -1, 40, 3], [10]]) == []


def test_a_consumer_that_fails_every_pop_is_reported_at_the_deadline() -> None:
    assert drain([[], [-1] * 100], drain_s=20.0) == ["c1"]


def test_an_error_between_empty_pops_does_not_count_as_empty() -> None:
    script = [0, -1] * 50  # never CAUGHT_UP_EMPTY_POPS successful empty pops in a row
    assert CAUGHT_UP_EMPTY_POPS == 2
    assert drain([script], drain_s=40.0) == ["c0"]


def test_a_consumer_still_popping_messages_at_the_deadline_is_reported() -> None:
    assert drain([[5] * 100], drain_s=10.0) == ["c0"]


def test_the_checker_sees_a_drained_history_by_worker_name() -> None:
    history = History((), (), consumers=("c0",))
    assert check(history, FinalRead((), 0)).ok


def test_a_consumer_is_caught_up_only_after_popping_nothing_for_idle_s_min() -> None:
    """A partition added last reaches a consumer's map only when the map is fetched again:
    its empty pops must span that long. Here its messages come at the 6th pop (6 s in)."""
    assert drain([[0, 0, 0, 0, 0, 7]], drain_s=30.0, idle_s_min=0.0) == []
    late = [0, 0, 0, 0, 0, 7]
    clock = [0.0]
    consumer = ScriptedConsumer("c0", list(late), clock)
    assert pop_until_caught_up([consumer], 30.0, clock=lambda: clock[0], idle_s_min=8.0) == []
    assert consumer.script == []  # it popped the 7 of the 6th pop before counting as caught up
    assert drain([[0] * 100], drain_s=5.0, idle_s_min=8.0) == ["c0"]  # never idle long enough
