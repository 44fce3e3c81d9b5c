"""One membership run (issue 19): topics of replication factor 1, 2 and 3 (one with
``min_insync_replicas`` 3, one with size retention), producers and consumers on each, the
membership nemesis's schedule (``nemesis.py``), then healing, a drain, and every check:

- per topic, the queue checker (``checker.py``: lost, duplicate, skipped, phantom, ...,
  with retention's log start);
- ``membership_checks``: no move left unfinished (``GET /overview``), every partition
  writable (one probe batch each), every replica's database identical over ``[log start,
  end)``, every ack of the ``min_insync_replicas`` topic held by that many replicas, and
  every drain refused only when it had to be;
- validity: enough acks per topic, every operation carried out, retention moved a log
  start, replicas converged, no crashed or hung worker, consumers caught up.

The cluster is the caller's, started with ``BROKERS_START`` brokers and small
``broker_dead_after_s`` / ``broker_replace_after_s`` (``membership_cluster``). Runs on the
caller's thread; each worker on its own thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import requests

from ops.cluster import LocalCluster
from raftq import Admin, ClientLimits
from raftq.errors import ApiError
from stress_tests import validity
from stress_tests.ack_producer import AckRecordingProducer
from stress_tests.checker import Verdict, check, log_starts
from stress_tests.credentials import client_session, node_session, require_admin_key
from stress_tests.faults import FaultInjector
from stress_tests.history import Recorder
from stress_tests.membership_checks import (
    ClusterState,
    MembershipVerdict,
    WriteProbe,
    check_drains,
    check_insync_acks,
    check_moves_finished,
    check_replica_databases,
    check_writable,
)
from stress_tests.membership_plan import (
    BROKERS_START,
    NEEDS_NETWORK,
    TOPICS,
    MembershipPlan,
    OpStep,
    TopicSpec,
    schedule_ops,
)
from stress_tests.membership_read import (
    PROBE_BOUND_S,
    overview,
    placement,
    probe_partition,
    read_topic,
)
from stress_tests.nemesis import MembershipNemesis, OpRecord
from stress_tests.network_partition import partitioner_if_needed
from stress_tests.polling import WaitTimeoutError, poll_until
from stress_tests.runner import (
    Drained,
    WorkerThread,
    capped_step,
    drain_idle,
    join_workers,
    publish,
    run_guarded,
)
from stress_tests.session import cluster_session
from stress_tests.validity import RunFacts
from stress_tests.workload import ConsumerWorker, ProducerWorker

MEMBERSHIP_LIMITS = {
    "broker_dead_after_s": "2",
    "broker_replace_after_s": "4",
    "replica_moves_max": "2",
}
"""A dead broker is replaced 6 s after it went silent (the defaults: 3 + 60 s)."""
WORKER_LIMITS = ClientLimits(connect_timeout_s=1.0, request_timeout_s=12.0, attempts_max=4)
IDLE_S_MIN = WORKER_LIMITS.partition_map_age_s_max + 1.0
"""A drained consumer pops nothing for this long: its partition map has been fetched again
since, so a partition the last operation added is among those it pops."""
DRAIN_S = 90.0
JOIN_S = 60.0
SETTLE_S = 150.0
"""After healing: until every move finished (judged by ``check_moves_finished`` then)."""


@contextlib.contextmanager
def membership_cluster(
    directory: Path, base_port: int, log: Callable[[str], None] = print
) -> Iterator[LocalCluster]:
    """A fresh cluster of ``BROKERS_START`` brokers with fast re-replication, stopped (and
    any network fault removed) however the block ends."""
    with cluster_session(
        directory, base_port, log, brokers=BROKERS_START, limits=MEMBERSHIP_LIMITS
    ) as cluster:
        yield cluster


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    plan: MembershipPlan
    seed: int
    topics: tuple[TopicSpec, ...] = TOPICS
    batch_messages: int = 20
    produce_pause_s: float = 0.15
    tail_s: float = 3.0
    duration_s_max: float = 600.0
    """The operations stop being started after this long (a problem: not all done)."""
    messages_max: int = 60_000
    """Per topic: its producers start no new batch past this many acks."""
    give_up_s: float = 90.0

    def topic(self, spec: TopicSpec) -> str:
        return f"{self.plan.name}-s{self.seed}-{spec.suffix}"


@dataclass
class TopicLoad:
    spec: TopicSpec
    name: str
    recorder: Recorder
    producers: list[ProducerWorker | AckRecordingProducer] = field(default_factory=list)
    consumers: list[ConsumerWorker] = field(default_factory=list)


@dataclass
class TopicResult:
    name: str
    verdict: Verdict
    acked: int
    log_starts: dict[int, int]


@dataclass
class MembershipReport:
    name: str
    seed: int
    schedule: list[str]
    topics: list[TopicResult]
    membership: MembershipVerdict
    ops: list[OpRecord]
    duration_s: float
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(t.verdict.ok for t in self.topics) and self.membership.ok and not self.problems

    @property
    def acked(self) -> int:
        return sum(t.acked for t in self.topics)

    def lines(self) -> list[str]:
        head = "PASS" if self.passed else "FAIL"
        done = sum(1 for op in self.ops if op.outcome != "failed")
        out = [
            f"== {head} {self.name} seed={self.seed}: {self.acked} acked, "
            f"{done}/{len(self.schedule)} operations, {self.duration_s:.1f} s"
        ]
        out += [f"  problem: {p}" for p in self.problems]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  op {op.describe()}" for op in self.ops]
        out += self.membership.lines()
        for topic in self.topics:
            out.append(
                f"  -- topic {topic.name}: {topic.acked} acked, log starts {topic.log_starts}"
            )
            out += [
                line
                for line in topic.verdict.lines()
                if not line.strip().endswith("0  (must be 0)")
            ]
        return out

    def json_name(self) -> str:
        return f"{self.name}-s{self.seed}.json"

    def json_body(self) -> dict[str, object]:
        return {
            "name": self.name,
            "seed": self.seed,
            "passed": self.passed,
            "schedule": self.schedule,
            "ops": [asdict(op) for op in self.ops],
            "membership": {"counts": self.membership.counts, "examples": self.membership.examples},
            "topics": {
                t.name: {
                    "acked": t.acked,
                    "log_starts": t.log_starts,
                    "counts": t.verdict.counts,
                    "info": t.verdict.info,
                    "examples": t.verdict.examples,
                }
                for t in self.topics
            },
            "acked": self.acked,
            "duration_s": self.duration_s,
            "problems": self.problems,
            "notes": self.notes,
        }


class MembershipRun:
    """Everything one run owns; ``execute`` is the whole run."""

    def __init__(self, cluster: LocalCluster, config: MembershipConfig, log: Callable[[str], None]):
        self.cluster, self.config, self.log = cluster, config, log
        self.api_key = require_admin_key(cluster)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.loads = [self._load(spec) for spec in config.topics]
        first = self.loads[0]
        self.network = partitioner_if_needed(
            cluster, any(kind in NEEDS_NETWORK for kind, _ in config.plan.ops)
        )
        tag = f"{first.name}-{int(time.time())}"
        self.injector = FaultInjector(
            cluster, first.name, first.recorder, f"{tag}-probe", self.network, log
        )
        self.nemesis = MembershipNemesis(
            cluster, self.injector, first.name, self._partitions_of_first, log
        )

    def _load(self, spec: TopicSpec) -> TopicLoad:
        name = self.config.topic(spec)
        load = TopicLoad(spec, name, Recorder())
        tag = f"{name}-{int(time.time())}"
        url = self.cluster.lb_url
        for i in range(spec.producers):
            if spec.min_insync_replicas is not None:
                load.producers.append(
                    AckRecordingProducer(
                        f"{tag}-p{i}",
                        url,
                        name,
                        load.recorder,
                        api_key=self.api_key,
                        batch_messages=self.config.batch_messages,
                        give_up_s=self.config.give_up_s,
                        partition_id=i % spec.partitions,
                    )
                )
            else:
                load.producers.append(
                    ProducerWorker(
                        f"{tag}-p{i}",
                        url,
                        name,
                        load.recorder,
                        api_key=self.api_key,
                        batch_messages=self.config.batch_messages,
                        limits=WORKER_LIMITS,
                        give_up_s=self.config.give_up_s,
                        direct=i % 2 == 0,
                    )
                )
        load.consumers = [
            ConsumerWorker(
                f"{tag}-c{i}",
                url,
                name,
                load.recorder,
                api_key=self.api_key,
                limits=WORKER_LIMITS,
                poll_messages=500,
                direct=i % 2 == 1,
            )
            for i in range(spec.consumers)
        ]
        return load

    def _partitions_of_first(self) -> int:
        with client_session(self.api_key) as session:
            try:
                return len(placement(session, self.cluster.lb_url, self.loads[0].name))
            except WaitTimeoutError:
                return self.loads[0].spec.partitions

    # --- the run ---------------------------------------------------------------------------
    def execute(self) -> MembershipReport:
        started_s = time.monotonic()
        steps = schedule_ops(self.config.plan, self.config.seed)
        self.log(f"run {self.config.plan.name} seed={self.config.seed}; schedule:")
        for step in steps:
            self.log(f"  {step.describe()}")
        self._create_topics()
        workers = self._start_workload(started_s)
        problems = self._operate(steps, started_s)
        time.sleep(self.config.tail_s)
        self.stop.set()
        hung = join_workers(workers, JOIN_S)
        self.injector.restore()
        drained = drain_idle(workers, hung, DRAIN_S, IDLE_S_MIN)
        self.injector.close()
        self.nemesis.close()
        report = self._judge(steps, problems, drained, started_s)
        return report

    def _create_topics(self) -> None:
        with Admin(self.cluster.lb_url, api_key=self.api_key) as admin:
            for load in self.loads:
                spec = load.spec
                try:
                    admin.create_topic(
                        load.name,
                        partitions=spec.partitions,
                        replication_factor=spec.replication_factor,
                        retention_bytes=spec.retention_bytes,
                        min_insync_replicas=spec.min_insync_replicas,
                    )
                except ApiError as exc:
                    if exc.status != 409:  # created by an earlier attempt whose answer was lost
                        raise

    def _start_workload(self, started_s: float) -> list[WorkerThread]:
        deadline_s = started_s + self.config.duration_s_max + 60.0
        workers: list[WorkerThread] = []
        for load in self.loads:
            for producer in load.producers:
                step = self._producer_step(load, producer)
                workers.append(self._thread(step, deadline_s, len(workers), producers=(producer,)))
            for consumer in load.consumers:
                workers.append(
                    self._thread(consumer.step, deadline_s, len(workers), consumers=(consumer,))
                )
        for worker in workers:
            worker.thread.start()
        return workers

    def _thread(
        self,
        step: Callable[[], object],
        deadline_s: float,
        index: int,
        producers: tuple[ProducerWorker | AckRecordingProducer, ...] = (),
        consumers: tuple[ConsumerWorker, ...] = (),
    ) -> WorkerThread:
        thread = threading.Thread(
            target=self._guarded,
            args=(step, deadline_s),
            daemon=True,
            name=f"membership-worker-{index}",
        )
        return WorkerThread(thread, producers, consumers)

    def _producer_step(
        self, load: TopicLoad, worker: ProducerWorker | AckRecordingProducer
    ) -> Callable[[], object]:
        return capped_step(worker, load.recorder, self.config.messages_max)

    def _guarded(self, step: Callable[[], object], deadline_s: float) -> None:
        run_guarded(step, self.stop, deadline_s, self.config.produce_pause_s, self.errors)

    def _operate(self, steps: tuple[OpStep, ...], started_s: float) -> list[str]:
        problems: list[str] = []
        for step in steps:
            if time.monotonic() - started_s > self.config.duration_s_max:
                problems.append(f"out of time before operation #{step.index}")
                break
            time.sleep(step.gap_s)
            try:
                self.nemesis.execute(step)
            except Exception as exc:  # NemesisError, ClusterError, an HTTP error: a problem
                problems.append(f"operation #{step.index} {step.kind.value}: {exc}")
                self.log(f"  op #{step.index} {step.kind.value} failed: {exc}")
                self.nemesis.records.append(
                    OpRecord(step.index, step.kind.value, "-", "failed", 0.0, str(exc)[:300])
                )
                self.injector.restore()
        return problems

    # --- after healing ---------------------------------------------------------------------
    def _judge(
        self, steps: tuple[OpStep, ...], problems: list[str], drained: Drained, started_s: float
    ) -> MembershipReport:
        membership = MembershipVerdict()
        notes: list[str] = []
        problems += self._run_problems(drained)
        with client_session(self.api_key) as client, node_session(self.cluster) as node:
            self._settle(client, membership, problems)
            results = []
            for load in self.loads:
                result, probes = self._judge_topic(load, drained, client, node, membership)
                results.append(result)
                problems += result.problems
                notes += result.notes
                check_writable(probes, PROBE_BOUND_S, membership)
        check_drains(self.nemesis.drains, membership)
        return MembershipReport(
            self.config.plan.name,
            self.config.seed,
            [s.describe() for s in steps],
            [r.topic for r in results],
            membership,
            list(self.nemesis.records),
            time.monotonic() - started_s,
            problems,
            notes,
        )

    def _run_problems(self, drained: Drained) -> list[str]:
        found = [f"worker crashed: {exc!r}" for exc in self.errors]
        found += [f"worker hung: {name} still running after its join" for name in drained.hung]
        failed = [op for op in self.nemesis.records if op.outcome == "failed"]
        done = len(self.nemesis.records) - len(failed)
        if done < self.config.plan.planned:
            found.append(f"invalid: {done} of {self.config.plan.planned} operations carried out")
        return found

    def _settle(
        self, client: requests.Session, membership: MembershipVerdict, problems: list[str]
    ) -> None:
        """Wait (bounded) until every move finished, then judge the overview of that moment
        (or the last one seen: a move that never finishes is flagged)."""
        factors = {load.name: load.spec.replication_factor for load in self.loads}
        last: list[ClusterState] = []

        def settled() -> bool:
            state = overview(client, self.cluster.lb_url)
            if state is None:
                return False
            last[:] = [state]
            trial = MembershipVerdict()
            check_moves_finished(state, factors, trial)
            return trial.ok

        with contextlib.suppress(WaitTimeoutError):
            poll_until(settled, SETTLE_S, "every move finished", 1.0)
        if not last:
            problems.append(f"no overview answered within {SETTLE_S:g} s after healing")
            return
        check_moves_finished(last[0], factors, membership)

    def _judge_topic(
        self,
        load: TopicLoad,
        drained: Drained,
        client: requests.Session,
        node: requests.Session,
        membership: MembershipVerdict,
    ) -> tuple[JudgedTopic, list[WriteProbe]]:
        mine = {c.name for c in load.consumers}
        final, stuck = read_topic(self.cluster, node, client, load.name)
        history = replace(
            load.recorder.snapshot(), consumers=tuple(n for n in drained.finished if n in mine)
        )
        verdict = check(history, final)
        check_replica_databases(load.name, final.replicas, load.spec.replication_factor, membership)
        if load.spec.min_insync_replicas is not None:
            check_insync_acks(load.name, history, load.spec.min_insync_replicas, membership)
        starts = log_starts(final.replicas)
        facts = RunFacts(
            acked=verdict.info.get("sent_acked", 0),
            min_acked=load.spec.min_acked,
            faults_planned=0,
            faults_injected=0,
            converged=not stuck,
            consumers=tuple(end for end in drained.consumers if end.name in mine),
            drain_s=DRAIN_S,
        )
        problems = [f"{load.spec.suffix}: {p}" for p in validity.problems(facts)]
        problems += [f"{load.spec.suffix}: did not converge: {s}" for s in stuck]
        if load.spec.retention_bytes and not any(starts.values()):
            problems.append(f"invalid: retention never moved a log start of {load.name}")
        tag = f"{load.name}-after-{int(time.time())}"
        probes = [
            probe_partition(client, self.cluster.lb_url, load.name, pid, f"{tag}-w{pid}")
            for pid in range(final.partition_count)
        ]
        result = TopicResult(load.name, verdict, facts.acked, starts)
        return JudgedTopic(result, problems, validity.notes(facts)), probes


@dataclass(frozen=True, slots=True)
class JudgedTopic:
    topic: TopicResult
    problems: list[str]
    notes: list[str]


def run_membership(
    cluster: LocalCluster,
    config: MembershipConfig,
    out_dir: Path | None = None,
    log: Callable[[str], None] = print,
) -> MembershipReport:
    return publish(MembershipRun(cluster, config, log).execute(), out_dir, log)
