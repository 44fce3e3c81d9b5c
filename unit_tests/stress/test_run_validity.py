"""The run's own rules (``stress_tests/validity.py``, used by ``runner.py``): a valid run has no
problem, and each way a run proves nothing or fails outside the checker's sight (too few
acks, a missing fault, no convergence, a crashed or hung worker, a drain that timed out,
consumer errors it did not recover from) gives exactly its own problem. A hung worker is
never driven from a second thread (``runner.drain_idle``)."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

from stress_tests.runner import WorkerThread, drain_idle, join_workers
from stress_tests.validity import ConsumerEnd, RunFacts, notes, problems

VALID = RunFacts(
    acked=3_000,
    min_acked=1_000,
    faults_planned=4,
    faults_injected=4,
    consumers=(ConsumerEnd("c0", errors=0), ConsumerEnd("c1", errors=7, last_error="timeout")),
    drain_s=60.0,
)
THREAD_JOIN_S = 30.0
"""Bound on joining a test's own thread once it was released."""


def only_problem(**changes: object) -> str:
    found = problems(dataclasses.replace(VALID, **changes))  # type: ignore[arg-type]
    assert len(found) == 1, found
    return found[0]


def test_a_valid_run_has_no_problem_and_shows_its_tolerated_consumer_errors() -> None:
    assert problems(VALID) == []
    assert notes(VALID) == [
        "consumer c1: 7 errors, tolerated (caught up afterwards); the last: timeout"
    ]


def test_too_few_acknowledgements_make_the_run_invalid() -> None:
    assert only_problem(acked=999) == "invalid: only 999 messages acknowledged (< 1000)"


def test_fewer_faults_than_planned_make_the_run_invalid() -> None:
    assert only_problem(faults_injected=3) == "invalid: 3 of 4 planned faults injected"


def test_a_partition_left_without_writes_after_a_fault_fails() -> None:
    assert "2 faults left the partition" in only_problem(probe_timeouts=2)


def test_replicas_that_did_not_converge_fail() -> None:
    assert "did not converge" in only_problem(converged=False)


def test_a_crashed_worker_fails() -> None:
    assert only_problem(crashed=("RuntimeError('boom')",)) == (
        "worker crashed: RuntimeError('boom')"
    )


def test_a_hung_worker_fails() -> None:
    assert "worker hung: stress-worker-3" in only_problem(hung=("stress-worker-3",))


def test_a_consumer_that_failed_every_pop_after_a_fault_fails_the_drain() -> None:
    wedged = ConsumerEnd("c1", errors=40, last_error="503 REFUSED", caught_up=False)
    problem = only_problem(consumers=(VALID.consumers[0], wedged))
    assert problem.startswith("drain timed out: consumer c1 not caught up within 60 s")
    assert "40 errors, the last: 503 REFUSED" in problem


def test_a_consumer_behind_at_the_deadline_fails_even_without_errors() -> None:
    behind = ConsumerEnd("c0", errors=0, caught_up=False)
    assert only_problem(consumers=(behind,)) == (
        "drain timed out: consumer c0 not caught up within 60 s"
    )


@dataclass
class FakeProducer:
    pending: bool = True
    stepped_on: list[int] = field(default_factory=list)
    gave_up: bool = False

    def step(self) -> bool:
        self.stepped_on.append(threading.get_ident())
        self.pending = False
        return True

    def give_up(self) -> None:
        self.gave_up = True


@dataclass
class FakeConsumer:
    name: str
    errors: int = 0
    last_error: str = ""
    pops: int = 0
    closed: bool = False

    def step(self) -> int:
        self.pops += 1
        return 0

    def close(self) -> None:
        self.closed = True


def test_a_hung_worker_is_reported_and_left_to_its_own_thread() -> None:
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(THREAD_JOIN_S,), name="stress-worker-0")
    done = threading.Thread(target=lambda: None, name="stress-worker-1")
    stuck.start()
    done.start()
    hung_producer, idle_producer = FakeProducer(), FakeProducer()
    hung_consumer, idle_consumer = FakeConsumer("c-hung"), FakeConsumer("c-idle")
    workers = [
        WorkerThread(stuck, (hung_producer,), (hung_consumer,)),
        WorkerThread(done, (idle_producer,), (idle_consumer,)),
    ]
    try:
        hung = join_workers(workers, join_s=0.0)
        assert [w.thread.name for w in hung] == ["stress-worker-0"]
        drained = drain_idle(workers, hung, drain_s=THREAD_JOIN_S)
    finally:
        release.set()
        stuck.join(THREAD_JOIN_S)
    assert drained.hung == ("stress-worker-0",)
    assert hung_producer.stepped_on == [] and not hung_producer.gave_up
    assert hung_consumer.pops == 0 and not hung_consumer.closed
    assert idle_producer.stepped_on == [threading.get_ident()] and idle_producer.gave_up
    assert idle_consumer.closed and drained.finished == ("c-idle",)
    assert drained.consumers == (ConsumerEnd("c-idle", 0, "", caught_up=True),)
    assert "worker hung" in only_problem(hung=drained.hung, consumers=drained.consumers)
