"""One stress run: a workload against a running cluster, a fault schedule, then healing, a
final read of every replica and the checker's verdict.

A run is invalid (and fails) when it acknowledged fewer than ``min_acked`` messages or
injected fewer faults than planned: a run that proves nothing must not pass. It also fails on
a crashed or hung worker, a drain that timed out and consumer errors beyond their bound
(``validity.py``). Runs on the caller's thread; the workload runs on its own threads (one per
worker, or one for all); a worker whose thread hung is never driven from another.
Every client call (topic creation, the workers, the fault probes) carries the cluster's admin
API key; the final read reads as a node.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypeVar

from ops.cluster import LocalCluster
from raftq import Admin, ClientLimits
from stress_tests import validity
from stress_tests.checker import Verdict, check
from stress_tests.credentials import require_admin_key
from stress_tests.faults import FaultInjector
from stress_tests.final_read import final_read
from stress_tests.history import FaultRecord, Recorder
from stress_tests.network_partition import partitioner_if_needed
from stress_tests.scheduler import NEEDS_NETWORK, FaultPlan, FaultStep, schedule
from stress_tests.validity import ConsumerEnd, RunFacts
from stress_tests.workload import (
    ConsumerWorker,
    DrainingConsumer,
    ProducerWorker,
    ResendingProducer,
    pop_until_caught_up,
    resend_pending,
    run_bounded,
)

WORKER_LIMITS = ClientLimits(connect_timeout_s=1.0, request_timeout_s=12.0, attempts_max=4)
DRAIN_S = 60.0
"""Resending pending batches may take this long, and then popping until caught up too."""
JOIN_S = 60.0
"""Each worker thread's join after the stop: longer than one step (4 attempts of 12 s)."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    plan: FaultPlan
    seed: int
    producers: int = 4
    consumers: int = 2
    threaded: bool = True
    """False: every worker steps in turn on one thread (``stress.py``)."""
    batch_messages: int = 25
    messages_target: int = 3_000
    """After the last fault the load goes on until this many messages are acknowledged."""
    messages_max: int = 100_000
    """Producers stop starting batches once this many messages are acknowledged."""
    duration_s_max: float = 120.0
    tail_s: float = 3.0
    """Load after the last fault before stopping."""
    min_acked: int = 1_000
    produce_pause_s: float = 0.1
    give_up_s: float = 90.0
    """A batch still unacknowledged after this long is recorded as unknown (or failed)."""

    @property
    def topic(self) -> str:
        return f"{self.plan.name}-s{self.seed}"


@dataclass
class RunReport:
    name: str
    seed: int
    schedule: list[str]
    verdict: Verdict
    faults: list[FaultRecord]
    acked: int
    duration_s: float
    converged: bool
    probe_timeouts: int
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Tolerated, but shown: consumer errors the consumer recovered from."""

    @property
    def passed(self) -> bool:
        return self.verdict.ok and not self.problems

    def failover(self) -> dict[str, tuple[float, float, int]]:
        """fault kind -> (p50 s, max s, samples)."""
        by_kind: dict[str, list[float]] = {}
        for fault in self.faults:
            if fault.failover_s is not None:
                by_kind.setdefault(fault.kind, []).append(fault.failover_s)
        return {k: (statistics.median(v), max(v), len(v)) for k, v in by_kind.items()}

    def lines(self) -> list[str]:
        head = "PASS" if self.passed else "FAIL"
        out = [
            f"== {head} {self.name} seed={self.seed}: {self.acked} acked, "
            f"{len(self.faults)}/{len(self.schedule)} faults, {self.duration_s:.1f} s"
        ]
        out += [f"  problem: {p}" for p in self.problems]
        out += [f"  note: {n}" for n in self.notes]
        out += self.verdict.lines()
        for kind, (p50, worst, n) in sorted(self.failover().items()):
            out.append(f"  failover {kind:<26} p50 {p50:.2f} s  max {worst:.2f} s  (n={n})")
        return out

    def json_name(self) -> str:
        return f"{self.name}.json"

    def json_body(self) -> dict[str, object]:
        return {
            "name": self.name,
            "seed": self.seed,
            "passed": self.passed,
            "schedule": self.schedule,
            "counts": self.verdict.counts,
            "info": self.verdict.info,
            "examples": self.verdict.examples,
            "faults": [asdict(f) for f in self.faults],
            "acked": self.acked,
            "duration_s": self.duration_s,
            "problems": self.problems,
            "notes": self.notes,
            "failover": {
                k: {"p50_s": v[0], "max_s": v[1], "n": v[2]} for k, v in self.failover().items()
            },
        }


@dataclass(frozen=True, slots=True)
class WorkerThread:
    """One workload thread and the workers only it drives (every worker, on one thread, when
    the run is not threaded)."""

    thread: threading.Thread
    producers: tuple[ResendingProducer, ...] = ()
    consumers: tuple[DrainingConsumer, ...] = ()


@dataclass(frozen=True, slots=True)
class Drained:
    """The end of a run's workload: what the report and the checker need of it."""

    hung: tuple[str, ...]
    """Threads still alive after their join timed out: their workers were left alone."""
    consumers: tuple[ConsumerEnd, ...]
    finished: tuple[str, ...]
    """The consumers drained to the end, which the checker holds to the whole log."""


def join_workers(workers: Sequence[WorkerThread], join_s: float) -> list[WorkerThread]:
    """Join each thread (each for at most ``join_s``); the ones still alive (hung)."""
    for worker in workers:
        worker.thread.join(join_s)
    return [worker for worker in workers if worker.thread.is_alive()]


def drain_idle(
    workers: Sequence[WorkerThread],
    hung: Sequence[WorkerThread],
    drain_s: float,
    idle_s_min: float = 0.0,
) -> Drained:
    """Resend pending batches, then pop until caught up (``pop_until_caught_up``), with the
    workers of the threads that ended only: a hung thread may still be inside its worker's
    step, and a worker is used by one thread at a time."""
    idle = [worker for worker in workers if worker not in hung]
    resend_pending([p for w in idle for p in w.producers], time.monotonic() + drain_s)
    drained = [c for w in idle for c in w.consumers]
    deadline_s = time.monotonic() + drain_s
    behind = set(pop_until_caught_up(drained, deadline_s, idle_s_min=idle_s_min))
    ends = [ConsumerEnd(c.name, c.errors, c.last_error, c.name not in behind) for c in drained]
    return Drained(tuple(w.thread.name for w in hung), tuple(ends), tuple(c.name for c in drained))


def capped_step(
    worker: ResendingProducer, recorder: Recorder, messages_max: int
) -> Callable[[], object]:
    """The worker's step while ``recorder`` holds fewer than ``messages_max`` acknowledged
    messages; past that, only while the worker has a batch pending (no new batch starts)."""

    def step() -> object:
        if worker.pending or recorder.acked_messages() < messages_max:
            return worker.step()
        return None

    return step


def run_guarded(
    step: Callable[[], object],
    stop: threading.Event,
    deadline_s: float,
    pause_s: float,
    errors: list[BaseException],
) -> None:
    """``run_bounded``; whatever it raises goes into ``errors`` (a worker thread's target)."""
    try:
        run_bounded(step, stop, deadline_s, pause_s)
    except BaseException as exc:  # reported as a problem of the run, not swallowed
        errors.append(exc)


class Run:
    """Everything one run owns; ``execute`` is the whole run."""

    def __init__(self, cluster: LocalCluster, config: RunConfig, log: Callable[[str], None]):
        self.cluster, self.config, self.log = cluster, config, log
        self.recorder = Recorder()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        tag = f"{config.topic}-{int(time.time())}"
        url, topic = cluster.lb_url, config.topic
        self.api_key = require_admin_key(cluster)
        self.producers = [
            ProducerWorker(
                f"{tag}-p{i}",
                url,
                topic,
                self.recorder,
                api_key=self.api_key,
                batch_messages=config.batch_messages,
                limits=WORKER_LIMITS,
                give_up_s=config.give_up_s,
                direct=i % 2 == 0,  # both paths under every fault: brokers directly, and the LB
            )
            for i in range(config.producers)
        ]
        self.consumers = [
            ConsumerWorker(
                f"{tag}-c{i}",
                url,
                topic,
                self.recorder,
                api_key=self.api_key,
                limits=WORKER_LIMITS,
                poll_messages=500,
                direct=i % 2 == 1,
            )
            for i in range(config.consumers)
        ]
        self.network = partitioner_if_needed(
            cluster, any(kind in NEEDS_NETWORK for kind, _ in config.plan.faults)
        )
        self.injector = FaultInjector(
            cluster, topic, self.recorder, f"{tag}-probe", self.network, log
        )

    def execute(self) -> RunReport:
        started_s = time.monotonic()
        steps = schedule(self.config.plan, self.config.seed)
        self.log(f"run {self.config.topic} seed={self.config.seed}; schedule:")
        for step in steps:
            self.log(f"  {step.describe()}")
        Admin(self.cluster.lb_url, api_key=self.api_key).create_topic(
            self.config.topic, partitions=self.config.plan.partition_count
        )
        workers = self._start_workload(started_s)
        faults, problems = self._inject(steps, started_s)
        self._finish_load(started_s)
        hung = join_workers(workers, JOIN_S)
        self.injector.restore()
        drained = drain_idle(workers, hung, DRAIN_S)
        self.injector.close()
        history = replace(self.recorder.snapshot(), consumers=drained.finished)
        final, converged = final_read(
            self.cluster, self.config.topic, self.config.plan.partition_count
        )
        verdict = check(history, final)
        facts = RunFacts(
            acked=verdict.info.get("sent_acked", 0),
            min_acked=self.config.min_acked,
            faults_planned=len(steps),
            faults_injected=len(faults),
            probe_timeouts=self.injector.probe_timeouts,
            converged=converged,
            crashed=tuple(repr(e) for e in self.errors),
            hung=drained.hung,
            consumers=drained.consumers,
            drain_s=DRAIN_S,
        )
        return self._report(steps, verdict, faults, problems, started_s, facts)

    def _finish_load(self, started_s: float) -> None:
        """Load for ``tail_s`` more, and until ``messages_target`` acks (within the run's
        duration), then stop the workers."""
        time.sleep(self.config.tail_s)
        deadline_s = started_s + self.config.duration_s_max
        while (
            self.recorder.acked_messages() < self.config.messages_target
            and time.monotonic() < deadline_s
        ):
            time.sleep(0.2)
        self.stop.set()

    def _start_workload(self, started_s: float) -> list[WorkerThread]:
        deadline_s = started_s + self.config.duration_s_max
        steps: list[Callable[[], object]] = [self._producer_step(p) for p in self.producers]
        steps += [c.step for c in self.consumers]
        owners: list[tuple[tuple[ProducerWorker, ...], tuple[ConsumerWorker, ...]]]
        owners = [((p,), ()) for p in self.producers] + [((), (c,)) for c in self.consumers]
        if not self.config.threaded:
            steps = [_round_robin(steps)]
            owners = [(tuple(self.producers), tuple(self.consumers))]
        workers = [
            WorkerThread(
                threading.Thread(
                    target=self._guarded,
                    args=(step, deadline_s),
                    daemon=True,
                    name=f"stress-worker-{i}",
                ),
                producers,
                consumers,
            )
            for i, (step, (producers, consumers)) in enumerate(zip(steps, owners, strict=True))
        ]
        for worker in workers:
            worker.thread.start()
        return workers

    def _producer_step(self, worker: ProducerWorker) -> Callable[[], object]:
        return capped_step(worker, self.recorder, self.config.messages_max)

    def _guarded(self, step: Callable[[], object], deadline_s: float) -> None:
        run_guarded(step, self.stop, deadline_s, self.config.produce_pause_s, self.errors)

    def _inject(
        self, steps: tuple[FaultStep, ...], started_s: float
    ) -> tuple[list[FaultRecord], list[str]]:
        faults: list[FaultRecord] = []
        problems: list[str] = []
        for step in steps:
            if time.monotonic() - started_s > self.config.duration_s_max:
                problems.append(f"out of time before fault #{step.index}")
                break
            time.sleep(step.gap_s)
            try:
                faults.append(self.injector.execute(step))
            except Exception as exc:
                problems.append(f"fault #{step.index} {step.kind.value}: {exc}")
                self.injector.restore()
        return faults, problems

    def _report(
        self,
        steps: tuple[FaultStep, ...],
        verdict: Verdict,
        faults: list[FaultRecord],
        problems: list[str],
        started_s: float,
        facts: RunFacts,
    ) -> RunReport:
        return RunReport(
            self.config.topic,
            self.config.seed,
            [s.describe() for s in steps],
            verdict,
            faults,
            facts.acked,
            time.monotonic() - started_s,
            facts.converged,
            facts.probe_timeouts,
            [*problems, *validity.problems(facts)],
            validity.notes(facts),
        )


def _round_robin(steps: list[Callable[[], object]]) -> Callable[[], object]:
    def step() -> object:
        for one in steps:
            one()
        return None

    return step


def run(
    cluster: LocalCluster,
    config: RunConfig,
    out_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> RunReport:
    return publish(Run(cluster, config, log).execute(), out_dir, log)


class Report(Protocol):
    """What ``publish`` needs of a run's report (``RunReport``, ``MembershipReport``)."""

    def lines(self) -> list[str]: ...

    def json_name(self) -> str: ...

    def json_body(self) -> dict[str, object]: ...


ReportT = TypeVar("ReportT", bound=Report)


def publish(report: ReportT, out_dir: Path | None, log: Callable[[str], None]) -> ReportT:
    """Log the report's lines and, given ``out_dir``, write its JSON there."""
    for line in report.lines():
        log(line)
    if out_dir is not None:
        write_report(report, out_dir)
    return report


def write_report(report: Report, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / report.json_name()
    path.write_text(json.dumps(report.json_body(), indent=2) + "\n")
    return path
