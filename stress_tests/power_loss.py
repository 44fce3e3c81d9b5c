"""Whole-cluster power loss (issue 7): a local cluster whose whole directory lives on the
power-cut file system, and cuts of power to all of it at once (``power_switch.py``: what a
cut and a restore are, shared with the consumer group's run).

The long version is a command (not run by CI)::

    python -m stress_tests.power_loss --cycles 8 --seed 7

continuous produce (through the load balancer and on the client's direct path) and pops,
and cuts at seeded moments: at random, right after a burst of acknowledgements, and right
after a Raft log compaction (small ``raft_log_compaction_bytes_min``); then healing, a drain,
a final read of every replica and the checker (``checker.py``). Exits 1 when anything is off.
The clients use the admin API key ``cluster up`` wrote to ``cluster.json`` (one key for the
whole run, across every cut); the final read reads as a node.
"""

from __future__ import annotations

import enum
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ops.cluster import LocalCluster
from raftq import Admin, ClientLimits
from stress_tests.checker import Verdict, check
from stress_tests.credentials import require_admin_key
from stress_tests.final_read import final_read
from stress_tests.history import FaultRecord, Recorder
from stress_tests.polling import WaitTimeoutError, poll_until
from stress_tests.power_switch import COMPACTION_LIMITS, PowerSwitch, power_cut_cluster
from stress_tests.powercut import fuse_unavailable_reason
from stress_tests.runner import RunReport, publish
from stress_tests.session import base_arguments, seed_or_clock, work_dir
from stress_tests.validity import ConsumerEnd, consumer_problems
from stress_tests.workload import (
    ConsumerWorker,
    ProducerWorker,
    pop_until_caught_up,
    resend_pending,
    run_bounded,
)

DEFAULT_BASE_PORT = 23100
"""The long run's ports: 23100..23499 (clear of the test and benchmark blocks)."""


# --- the long version: continuous load, cuts at seeded moments -----------------------------


class CutMoment(enum.Enum):
    RANDOM = "random"
    """Whenever the seeded gap ends, whatever is in flight."""
    AFTER_ACKS = "after-acks"
    """The instant the next batch is acknowledged (in the journals, maybe not yet flushed)."""
    AFTER_COMPACTION = "after-compaction"
    """The instant a broker's Raft full dump appears or changes: a log compaction just
    wrote its dump and is dropping (or has dropped) the journal entries it holds."""


WORKER_LIMITS = ClientLimits(connect_timeout_s=1.0, request_timeout_s=12.0, attempts_max=4)
MOMENT_WAIT_S_MAX = 30.0
"""Longest wait for an acknowledgement or a compaction to cut right after."""
SERVE_TIMEOUT_S = 60.0
"""From ``cluster up`` after a cut until the workers' writes are acknowledged again."""
DRAIN_S = 90.0
JOIN_S = 60.0


@dataclass(frozen=True, slots=True)
class PowerLossConfig:
    seed: int
    cycles: int = 8
    partitions: int = 3
    producers: int = 4
    consumers: int = 2
    batch_messages: int = 25
    gap_s_min: float = 2.0
    gap_s_max: float = 8.0
    """Load between a restart (writes acknowledged again) and the next cut, drawn per cycle."""
    tail_s: float = 3.0
    min_acked: int = 1_000
    give_up_s: float = 120.0
    """A batch unacknowledged this long is recorded as unknown (it spans cuts and restarts)."""
    limits: tuple[tuple[str, str], ...] = tuple(sorted(COMPACTION_LIMITS.items()))

    @property
    def topic(self) -> str:
        return f"power-loss-s{self.seed}"


def cut_moments(seed: int, cycles: int) -> tuple[CutMoment, ...]:
    """Every kind in turn (so each comes at least once from 3 cycles on), in a seeded order."""
    kinds = list(CutMoment)
    moments = [kinds[i % len(kinds)] for i in range(cycles)]
    random.Random(seed).shuffle(moments)
    return tuple(moments)


@dataclass
class CutRecord:
    cycle: int
    moment: CutMoment
    acked_before: int
    """Messages acknowledged when power was cut."""
    restart_s: float
    """From the cut until ``cluster up`` returned."""
    serve_s: float | None = None
    """From the cut until the next acknowledged write (None: not within the bound)."""
    note: str = ""


class PowerLossRun:
    """One long run; ``execute`` is all of it. Each worker runs on its own thread; cuts,
    restarts, the drain and the final read run on the caller's thread."""

    def __init__(
        self,
        config: PowerLossConfig,
        backing_dir: Path,
        base_port: int,
        log: Callable[[str], None] = print,
    ) -> None:
        self.config, self.backing_dir, self.base_port, self.log = (
            config,
            backing_dir,
            base_port,
            log,
        )
        self.recorder = Recorder()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.random = random.Random(config.seed)
        self.cuts: list[CutRecord] = []
        self.problems: list[str] = []
        self.started_s = time.monotonic()
        self.producers: list[ProducerWorker] = []
        self.consumers: list[ConsumerWorker] = []

    def _make_workers(self, url: str, api_key: str) -> None:
        config = self.config
        tag = f"{config.topic}-{int(time.time())}"
        self.producers = [
            ProducerWorker(
                f"{tag}-p{i}",
                url,
                config.topic,
                self.recorder,
                api_key=api_key,
                batch_messages=config.batch_messages,
                limits=WORKER_LIMITS,
                give_up_s=config.give_up_s,
                direct=i % 2 == 0,  # the client's direct path and the load balancer
            )
            for i in range(config.producers)
        ]
        self.consumers = [
            ConsumerWorker(
                f"{tag}-c{i}",
                url,
                config.topic,
                self.recorder,
                api_key=api_key,
                limits=WORKER_LIMITS,
                poll_messages=200,
                direct=i % 2 == 1,
            )
            for i in range(config.consumers)
        ]

    def execute(self) -> RunReport:
        limits = dict(self.config.limits)
        moments = cut_moments(self.config.seed, self.config.cycles)
        self.log(f"power loss seed={self.config.seed}: cuts {', '.join(m.value for m in moments)}")
        with power_cut_cluster(self.backing_dir, self.base_port, limits) as power:
            cluster = power.cluster
            api_key = require_admin_key(cluster)
            self._make_workers(cluster.lb_url, api_key)
            Admin(cluster.lb_url, api_key=api_key).create_topic(
                self.config.topic, self.config.partitions
            )
            threads = self._start_workers()
            try:
                for cycle, moment in enumerate(moments):
                    cluster = self._cycle(cycle, moment, power)
                self.stop.wait(self.config.tail_s)
            finally:
                self.stop.set()  # also when a cut or a restart failed: no worker left running
            for thread in threads:
                thread.join(JOIN_S)
            hung = [thread.name for thread in threads if thread.is_alive()]
            self.problems += [f"worker hung: {name} still running after its join" for name in hung]
            if not hung:  # a hung thread may be inside its worker: no second thread drives it
                self._drain(cluster.lb_url, api_key)
            final, converged = final_read(cluster, self.config.topic, self.config.partitions)
        finished = () if hung else tuple(c.name for c in self.consumers)
        verdict = check(replace(self.recorder.snapshot(), consumers=finished), final)
        return self._report(moments, verdict, converged)

    def _start_workers(self) -> list[threading.Thread]:
        steps: list[Callable[[], object]] = [p.step for p in self.producers]
        steps += [c.step for c in self.consumers]
        threads = [
            threading.Thread(target=self._guarded, args=(step,), daemon=True, name=f"power-{i}")
            for i, step in enumerate(steps)
        ]
        for thread in threads:
            thread.start()
        return threads

    def _guarded(self, step: Callable[[], object]) -> None:
        deadline_s = time.monotonic() + 3600.0  # the run stops its workers long before
        try:
            run_bounded(step, self.stop, deadline_s, pause_s=0.02)
        except BaseException as exc:  # reported as a problem of the run, not swallowed
            self.errors.append(exc)

    def _cycle(self, cycle: int, moment: CutMoment, power: PowerSwitch) -> LocalCluster:
        """Load for a seeded while, wait for the moment, cut, restart, wait for writes."""
        self.stop.wait(self.random.uniform(self.config.gap_s_min, self.config.gap_s_max))
        note = self._wait_for(moment, power.directory)
        acked = self.recorder.acked_messages()
        cut_s = time.monotonic()
        power.cut(self.backing_dir / "node-logs" / f"cut-{cycle}")
        cluster = power.restore()
        record = CutRecord(cycle, moment, acked, time.monotonic() - cut_s, note=note)
        acked_at_restart = self.recorder.acked_messages()
        try:
            poll_until(
                lambda: self.recorder.acked_messages() > acked_at_restart,
                SERVE_TIMEOUT_S,
                "a write acknowledged after the restart",
            )
            record.serve_s = time.monotonic() - cut_s
        except WaitTimeoutError as exc:
            self.problems.append(f"cut #{cycle}: {exc}")
        self.cuts.append(record)
        self.recorder.fault(
            FaultRecord(
                f"power-cut-{moment.value}",
                "all nodes",
                cut_s - self.started_s,
                time.monotonic() - self.started_s,
                record.serve_s,
            )
        )
        self.log(
            f"  cut #{cycle} {moment.value}{' (' + note + ')' if note else ''}: {acked} acked "
            f"before; cluster up in {record.restart_s:.1f} s, writes acknowledged "
            f"{'never' if record.serve_s is None else f'{record.serve_s:.1f} s'} after the cut"
        )
        return cluster

    def _wait_for(self, moment: CutMoment, directory: Path) -> str:
        """Waits for the cut's moment; returns what was seen (for the log)."""
        if moment is CutMoment.RANDOM:
            return ""
        if moment is CutMoment.AFTER_ACKS:
            condition = self._next_ack_seen(self.recorder.acked_messages())
            what = "an acknowledgement to cut right after"
        else:
            condition = _next_dump_seen(directory, dump_stamps(directory))
            what = "a Raft log compaction (a full dump written) to cut right after"
        try:
            seen = poll_until(condition, MOMENT_WAIT_S_MAX, what, period_s=0.005)
        except WaitTimeoutError as exc:
            self.problems.append(f"invalid: {exc}")
            return "not seen: cut anyway"
        return seen

    def _next_ack_seen(self, acked_before: int) -> Callable[[], str | None]:
        def seen() -> str | None:
            acked = self.recorder.acked_messages()
            return f"{acked - acked_before} more acknowledged" if acked > acked_before else None

        return seen

    def _drain(self, url: str, api_key: str) -> None:
        """Resend pending batches, write to every partition (so each has a leader that has
        committed an entry of its term: everything before is applied), pop until empty."""
        deadline_s = time.monotonic() + DRAIN_S
        resend_pending(self.producers, deadline_s)
        for partition_id in range(self.config.partitions):
            probe = ProducerWorker(
                f"{self.producers[0].name}-probe{partition_id}",
                url,
                self.config.topic,
                self.recorder,
                api_key=api_key,
                batch_messages=1,
                limits=WORKER_LIMITS,
                give_up_s=self.config.give_up_s,
                partition_id=partition_id,
                direct=False,
            )
            while not probe.step() and time.monotonic() < deadline_s:
                pass
            probe.give_up()
        behind = pop_until_caught_up(self.consumers, deadline_s)
        ends = [
            ConsumerEnd(c.name, c.errors, c.last_error, c.name not in behind)
            for c in self.consumers
        ]
        self.problems += consumer_problems(tuple(ends), DRAIN_S)

    def report_so_far(self) -> RunReport:
        """The report of a run that broke before its final read: its cuts and problems."""
        moments = cut_moments(self.config.seed, self.config.cycles)
        return self._report(moments, Verdict(), converged=False)

    def _report(self, moments: Sequence[CutMoment], verdict: Verdict, converged: bool) -> RunReport:
        history = self.recorder.snapshot()
        acked = verdict.info.get("sent_acked", self.recorder.acked_messages())
        problems = list(self.problems)
        if acked < self.config.min_acked:
            problems.append(f"invalid: only {acked} messages acknowledged")
        if len(self.cuts) < len(moments):
            problems.append(f"invalid: {len(self.cuts)} of {len(moments)} cuts made")
        if not converged:
            problems.append("replicas did not converge (same end offset, all flushed) in time")
        problems += [f"worker crashed: {e!r}" for e in self.errors]
        return RunReport(
            self.config.topic,
            self.config.seed,
            [f"#{i} power cut {m.value}" for i, m in enumerate(moments)],
            verdict,
            list(history.faults),
            acked,
            time.monotonic() - self.started_s,
            converged,
            0,
            problems,
        )


def dump_stamps(directory: Path) -> dict[Path, tuple[int, int]]:
    """Every Raft full dump of the cluster (brokers' partitions, managers): its inode and
    modification time. A compaction writes a new dump under a temporary name and renames it
    into place, so both change."""
    stamps = {}
    for path in [
        *directory.glob("broker-*/replicas/*/*.dump"),
        *directory.glob("manager-*/*.dump"),
    ]:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        stamps[path] = (info.st_ino, info.st_mtime_ns)
    return stamps


def _next_dump_seen(
    directory: Path, before: Mapping[Path, tuple[int, int]]
) -> Callable[[], str | None]:
    return lambda: _changed_dump(before, dump_stamps(directory))


def _changed_dump(
    before: Mapping[Path, tuple[int, int]], now: Mapping[Path, tuple[int, int]]
) -> str | None:
    for path, stamp in now.items():
        if before.get(path) != stamp:
            return f"{path.parent.name}/{path.name} written"
    return None


def run_long(
    seed: int,
    cycles: int,
    base_port: int,
    directory: Path,
    out_dir: Path | None,
    log: Callable[[str], None] = print,
) -> RunReport:
    """The long power-loss run (its own cluster on its own power-cut disk in ``directory``)."""
    config = PowerLossConfig(seed, cycles=cycles)
    reason = fuse_unavailable_reason()
    if reason is None:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        run = PowerLossRun(config, directory, base_port, log)
        try:
            report = run.execute()
        except Exception as exc:  # a run that broke (e.g. the cluster did not come back) fails
            run.problems.append(f"the run broke: {_shortened(repr(exc))}")
            report = run.report_so_far()
    else:  # a run that cannot cut power proves nothing: it fails, saying why
        problem = f"invalid: the power-cut file system cannot run here: {reason}"
        report = RunReport(config.topic, seed, [], Verdict(), [], 0, 0.0, False, 0, [problem])
    return publish(report, out_dir, log)


def _shortened(text: str, head: int = 600, tail: int = 1500) -> str:
    """The start (which command failed) and the end (its last words) of a long error."""
    return text if len(text) <= head + tail else f"{text[:head]} [...] {text[-tail:]}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arguments(__doc__ or "")
    parser.set_defaults(base_port=DEFAULT_BASE_PORT)
    parser.add_argument("--cycles", type=int, default=8, help="power cuts (default 8)")
    args = parser.parse_args(argv)
    seed = seed_or_clock(args.seed)
    print(f"power loss, seed {seed} (replay with --seed {seed})", flush=True)
    report = run_long(
        seed, args.cycles, args.base_port, work_dir(args.dir), args.out / "power-loss"
    )
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
