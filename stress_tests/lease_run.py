"""The at-least-once run of a consumer group (issue 20): worker processes
(``lease_worker``) share a group's messages while a producer fills the topic and a seeded
nemesis kill -9s workers (wherever they are: between a receive and its ack is the point),
stops one past the visibility timeout (its late acks come after its messages went to
another), and kill -9s or pauses partition leaders. Then every node runs again, workers
drain the group, and ``lease_checker`` judges the ledgers: every acknowledged produce
finished and acked; a message handed out again only once its lease ended or was nacked;
an acked one never again; redelivery within the visibility timeout plus one second (p99).
One message in ``poison_every`` is poison (every worker nacks it): each must be in the
group's dead-letter topic once, after exactly ``max_deliveries``, with its headers.

With ``power_cuts``, the cluster lives on the power-cut file system (``power_switch.py``)
and the nemesis also cuts the power of every node at once, right after a worker's ack was
answered, then restores it (``_PowerCuts``): every answered ack, lease and count must
survive (the checker's rules, unchanged across cuts). The workers are not cut (clients on
other machines).

Not covered here: redrive (not built yet).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any

import requests

from ops.cluster import LocalCluster
from protocol import dead_letters
from protocol.types import NewMessage
from raftq import Admin, GroupMember, PartitionOffset, ProduceError, Producer
from raftq.client_limits import ClientLimits
from raftq.errors import RaftQClientError
from raftq.records import Redriven
from stress_tests import lease_checker as checker
from stress_tests.cluster_view import manager_leader, partition_leader
from stress_tests.credentials import client_session, node_session, require_admin_key
from stress_tests.lease_worker import POISON_PREFIX, now_ms
from stress_tests.polling import WaitTimeoutError, poll_until
from stress_tests.power_switch import COMPACTION_LIMITS, PowerSwitch, power_cut_cluster
from stress_tests.session import cluster_session

WORKER_STOP_WAIT_S = 10.0
BROKER_DOWN_S = 2.0
LEADER_WAIT_S = 30.0
DRAIN_WAIT_S = 120.0
REDRIVE_WAIT_S = 60.0
REDRIVE_FIRST_MESSAGES = 1
"""The first redrive call's bound: the rest come after the manager leader's kill."""
REDRIVE_CLIENT_LIMITS = ClientLimits(attempts_max=1)
"""One attempt per call: ``_redrive`` asks again itself, so a failover is seen."""
"""After the faults: every acknowledged produce acked by a worker within this."""
PRODUCE_PAUSE_S = 0.05
DEAD_LETTER_PARTITIONS = 2
DEAD_LETTER_PAGE_MESSAGES = 1_000
DEAD_LETTER_READ_S = 10.0
BACKLOG_PAUSE_S = 0.5
NEMESIS_GAP_S = (1.0, 3.0)
BROKER_PAUSE_S = 3.0
RECOVERY_MS = 3_000
SWEEP_MARGIN_MS = 2_000
"""How long after a lease's latest possible end the drain's sweep may ack its receipt."""
BASE_PORT = 14_000
"""The command's cluster (clear of CI's port blocks and of the other tiers')."""
CUT_MOMENT_WAIT_S = 15.0
"""Longest wait for an ack answered ``done`` to cut right after (a cut without is invalid)."""
CUT_MOMENT_PERIOD_S = 0.005
"""How often the ledgers are looked at for that ack: the cut follows it within about this."""
SERVE_WAIT_S = 60.0
"""From the power back on until an ack sent after the cut is answered ``done``."""


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    seed: int
    duration_s: float = 40.0
    """Faults are injected and messages produced for this long."""
    workers: int = 3
    partitions: int = 3
    visibility_timeout_ms: int = 2_000
    messages: int = 3_000
    batch_messages: int = 20
    max_deliveries: int = 4
    """The group's: poison messages die at the fourth nack; a plain message whose leases
    ran out four times (its workers killed or paused) dies too."""
    poison_every: int = 97
    """Every this many produced messages, one is poison (every worker nacks it)."""
    power_cuts: int = 0
    """Whole-cluster power cuts, due at seeded times spread over ``duration_s`` (the
    cluster must be on the power-cut disk: ``run_lease``'s ``power``)."""
    redrive: bool = True
    """Once the poison messages are in the dead-letter topic, redrive them (in two calls,
    the manager leader killed between them): each must come back once, and the workers
    then finish it (``lease_checker``: ``redrive_missed``, ``redrive_miscounted``)."""
    backlog_max: int = 2_000
    """The producer waits while the group has this many messages not settled: the
    workers, not the machine's speed, set the pace, so the drain's bound holds on a
    loaded machine (seed 80001's long run, beside a test suite, produced 16,518 more than
    the workers could take in the drain's 120 s)."""

    @property
    def topic(self) -> str:
        return f"leased-{self.seed}"

    @property
    def group(self) -> str:
        return f"workers-{self.seed}"

    @property
    def dead_letter_topic(self) -> str:
        return f"leased-{self.seed}-dead"

    def message(self, number: int) -> NewMessage:
        """The run's ``number``-th message: every ``poison_every``-th is poison, with a
        header its dead letter must keep."""
        if number % self.poison_every == self.poison_every - 1:
            value = f"{POISON_PREFIX}{self.seed}-{number}"
            return NewMessage(value=value, headers=(("n", str(number)),))
        return NewMessage(value=f"v{self.seed}-{number}")


@dataclass
class LeaseReport:
    config: LeaseConfig
    verdict: checker.LeaseVerdict
    faults: list[str] = field(default_factory=list)
    produced: int = 0
    problems: list[str] = field(default_factory=list)
    """Why the run proves less than it claims (each fails it): a power cut not made, made
    without an ack answered just before, or with no ack answered after it; the producer
    crashed."""

    @property
    def passed(self) -> bool:
        return self.verdict.passed and self.produced > 0 and not self.problems

    def lines(self) -> list[str]:
        head = "PASS" if self.passed else "FAIL"
        return [
            f"== {head} lease run seed={self.config.seed}: {self.produced} acked produces, "
            f"{len(self.faults)} faults",
            *(f"  {fault}" for fault in self.faults),
            *(f"  {problem}" for problem in self.problems),
            *self.verdict.lines(),
        ]


@dataclass(frozen=True, slots=True)
class PowerCut:
    """One whole-cluster power cut of the run, in wall-clock ms (the workers' clock)."""

    number: int
    acked_ms: int | None
    """When the ack it followed was answered (None: none within ``CUT_MOMENT_WAIT_S``)."""
    cut_ms: int
    """When every node was killed (the disk then lost what was not synced)."""
    up_ms: int
    """When ``raftq cluster up`` returned."""
    back_ms: int | None
    """When the first ack sent after the cut was answered ``done`` (None: not within
    ``SERVE_WAIT_S``)."""

    @property
    def window(self) -> tuple[int, int]:
        """The outage: from the cut until ``RECOVERY_MS`` after the acks came back."""
        back_ms = self.up_ms + int(SERVE_WAIT_S * 1000) if self.back_ms is None else self.back_ms
        return (self.cut_ms, back_ms + RECOVERY_MS)

    def line(self) -> str:
        after = "no ack seen" if self.acked_ms is None else f"{self.cut_ms - self.acked_ms} ms"
        back = "never" if self.back_ms is None else f"{(self.back_ms - self.cut_ms) / 1000:.1f} s"
        return (
            f"power_cut #{self.number} of every node, {after} after an ack was answered: "
            f"cluster up {(self.up_ms - self.cut_ms) / 1000:.1f} s, acks answered again "
            f"{back} after the cut"
        )


class _Workers:
    """The worker processes; each new one (a replacement after a kill) has its own name
    and ledger file."""

    def __init__(self, lb_url: str, api_key: str, config: LeaseConfig, out_dir: Path) -> None:
        self._lb_url, self._api_key = lb_url, api_key
        self._config, self._out_dir = config, out_dir
        self._random = random.Random(f"workers/{config.seed}")
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self._started = 0

    def start(self) -> str:
        name = f"w{self._started}"
        self._started += 1
        env = {**os.environ, "RAFTQ_API_KEY": self._api_key}
        command = [
            sys.executable,
            "-m",
            "stress_tests.lease_worker",
            "--url",
            self._lb_url,
            "--topic",
            self._config.topic,
            "--group",
            self._config.group,
            "--ledger",
            str(self._out_dir / f"{name}.jsonl"),
            "--name",
            name,
            "--seed",
            str(self._random.randrange(2**31)),
        ]
        self.running[name] = subprocess.Popen(command, env=env)
        return name

    def keep_running(self) -> None:
        """Replace the workers that exited (one starts before the cluster answers)."""
        for name, process in list(self.running.items()):
            if process.poll() is not None:
                del self.running[name]
                self.start()

    def pick(self, rng: random.Random) -> tuple[str, subprocess.Popen[bytes]]:
        name = rng.choice(sorted(self.running))
        return name, self.running[name]

    def stop_all(self) -> None:
        for process in self.running.values():
            process.send_signal(signal.SIGCONT)
            process.terminate()
        for process in self.running.values():
            try:
                process.wait(WORKER_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class _PowerCuts:
    """The run's whole-cluster power cuts (``LeaseConfig.power_cuts``), due at seeded times
    spread over the run. Each waits for the next ack answered ``done`` and cuts right
    after it (an answered ack must survive: the sharpest moment to ask), restores the
    power, and waits until an ack sent after the cut is answered ``done``."""

    def __init__(self, power: PowerSwitch | None, config: LeaseConfig, out_dir: Path) -> None:
        if config.power_cuts and power is None:
            raise ValueError("power cuts need the cluster on the power-cut disk (power=...)")
        self._power, self._out_dir = power, out_dir
        rng = random.Random(f"power/{config.seed}")
        span_s = config.duration_s / (config.power_cuts + 1)
        self._due_s = [
            span_s * (number + 1) + rng.uniform(-span_s / 4, span_s / 4)
            for number in range(config.power_cuts)
        ]
        """Seconds into the run at which each cut is due."""
        self.records: list[PowerCut] = []
        self.problems: list[str] = []

    @property
    def left(self) -> int:
        return len(self._due_s) - len(self.records)

    def due(self, elapsed_s: float) -> bool:
        return self.left > 0 and elapsed_s >= self._due_s[len(self.records)]

    def cut(self) -> tuple[LocalCluster, PowerCut]:
        """Cut the power right after an ack, restore it: the cluster as restarted."""
        power = self._power
        if power is None:
            raise RuntimeError("a power cut without a power switch")
        number = len(self.records)
        watch = _AckWatch(self._out_dir)
        acked = self._wait(watch, 0, CUT_MOMENT_WAIT_S, f"power cut #{number}: an ack to follow")
        cut_ms = now_ms()
        power.cut(self._out_dir / "node-logs" / f"cut-{number}")
        cluster = power.restore()
        up_ms = now_ms()
        back = self._wait(watch, cut_ms, SERVE_WAIT_S, f"power cut #{number}: an ack after it")
        record = PowerCut(
            number,
            None if acked is None else acked.at_ms,
            cut_ms,
            up_ms,
            None if back is None else back.at_ms,
        )
        self.records.append(record)
        return cluster, record

    def _wait(
        self, watch: _AckWatch, sent_from_ms: int, timeout_s: float, what: str
    ) -> checker.Settled | None:
        """The next ack answered ``done`` and sent from ``sent_from_ms`` on, or None (a
        problem of the run: the cut did not test what it should)."""
        try:
            return poll_until(
                lambda: watch.next_done(sent_from_ms), timeout_s, what, CUT_MOMENT_PERIOD_S
            )
        except WaitTimeoutError as exc:
            self.problems.append(f"invalid: {exc}")
            return None


class _AckWatch:
    """What the workers' ledgers gained since the last look, searched for acks answered
    ``done``. Whole lines only: a line being written is read at the next look."""

    def __init__(self, out_dir: Path) -> None:
        self._out_dir = out_dir
        self._read_bytes = {path: path.stat().st_size for path in out_dir.glob("w*.jsonl")}

    def next_done(self, sent_from_ms: int) -> checker.Settled | None:
        """The first ack ``done`` sent at or after ``sent_from_ms`` among the lines written
        since the last look, or None."""
        found: checker.Settled | None = None
        for path in sorted(self._out_dir.glob("w*.jsonl")):
            start = self._read_bytes.get(path, 0)
            with open(path, "rb") as ledger:
                ledger.seek(start)
                gained = ledger.read()
            whole = gained[: gained.rfind(b"\n") + 1]
            self._read_bytes[path] = start + len(whole)
            for line in whole.decode("utf-8", errors="replace").splitlines():
                event = _ledger_event(line)
                if (
                    found is None
                    and isinstance(event, checker.Settled)
                    and (event.action, event.outcome) == ("ack", "done")
                    and event.sent_ms >= sent_from_ms
                ):
                    found = event
        return found


class _Nemesis:
    """The faults, one at a time, on the caller's thread. ``cluster`` is the cluster as
    last started (a power cut's restore starts new processes)."""

    def __init__(
        self, cluster: LocalCluster, config: LeaseConfig, workers: _Workers, cuts: _PowerCuts
    ) -> None:
        self.cluster, self._config, self._workers, self._cuts = cluster, config, workers, cuts
        self._random = random.Random(f"nemesis/{config.seed}")
        self._session = node_session(cluster)
        self.records: list[str] = []
        self.outages: list[tuple[int, int]] = []
        """Broker faults, wall-clock ms, each from its start to its end plus
        ``RECOVERY_MS`` (a new leader's election; receives that waited on a paused one)."""

    def run(self, until_s: float) -> None:
        faults: list[Callable[[], str]] = [
            self._kill_worker,
            self._pause_worker,
            self._kill_partition_leader,
            self._pause_partition_leader,
        ]
        started_s = time.monotonic()
        while time.monotonic() < until_s:
            time.sleep(self._random.uniform(*NEMESIS_GAP_S))
            self._workers.keep_running()
            if self._cuts.due(time.monotonic() - started_s):
                self._cut_power()
                continue
            fault = self._random.choice(faults)
            started = time.monotonic()
            started_ms = int(time.time() * 1000)
            target = fault()
            if fault in (self._kill_partition_leader, self._pause_partition_leader):
                self.outages.append((started_ms, int(time.time() * 1000) + RECOVERY_MS))
            self.records.append(
                f"{fault.__name__.lstrip('_')} {target} in {time.monotonic() - started:.1f} s"
            )
        while self._cuts.left:  # due within the run, but the faults before took the time
            self._cut_power()
        self._session.close()

    def _cut_power(self) -> None:
        self.cluster, cut = self._cuts.cut()
        self.records.append(cut.line())

    def _kill_worker(self) -> str:
        name, process = self._workers.pick(self._random)
        process.kill()
        process.wait()
        del self._workers.running[name]
        return f"{name} (replaced by {self._workers.start()})"

    def _pause_worker(self) -> str:
        name, process = self._workers.pick(self._random)
        process.send_signal(signal.SIGSTOP)
        time.sleep(self._config.visibility_timeout_ms / 1000 + 1.0)
        process.send_signal(signal.SIGCONT)
        return name

    def _kill_partition_leader(self) -> str:
        broker = self._leader()
        self.cluster.signal_node(broker, signal.SIGKILL)
        poll_until(lambda: not self.cluster.is_running(broker), WORKER_STOP_WAIT_S, broker)
        time.sleep(BROKER_DOWN_S)
        self.cluster.start_node(broker)
        return broker

    def _pause_partition_leader(self) -> str:
        broker = self._leader()
        self.cluster.signal_node(broker, signal.SIGSTOP)
        time.sleep(BROKER_PAUSE_S)
        self.cluster.signal_node(broker, signal.SIGCONT)
        return broker

    def _leader(self) -> str:
        partition_id = self._random.randrange(self._config.partitions)
        topic = self._config.topic
        found = poll_until(
            lambda: partition_leader(self.cluster, self._session, topic, partition_id),
            LEADER_WAIT_S,
            f"a leader of {topic}/{partition_id}",
        )
        return str(found)


def run_lease(
    cluster: LocalCluster,
    config: LeaseConfig,
    out_dir: Path,
    log: Callable[[str], None] = print,
    power: PowerSwitch | None = None,
) -> LeaseReport:
    """One run on ``cluster`` (running). ``power``: the power switch of ``cluster`` (on the
    power-cut disk), needed for ``config.power_cuts``; after a cut the run goes on with the
    cluster the switch restarted."""
    out_dir.mkdir(parents=True, exist_ok=True)
    api_key = require_admin_key(cluster)
    _create_group(cluster.lb_url, api_key, config)
    produced: list[checker.Produced] = []
    problems: list[str] = []
    redrive: checker.Redrive | None = None
    dead_letters = _DeadLetters(cluster, config, api_key)
    workers = _Workers(cluster.lb_url, api_key, config, out_dir)
    cuts = _PowerCuts(power, config, out_dir)
    nemesis = _Nemesis(cluster, config, workers, cuts)
    try:  # however it ends, no worker process is left behind
        with _producing(cluster.lb_url, config, api_key, produced, problems):
            for _ in range(config.workers):
                workers.start()
            nemesis.run(time.monotonic() + config.duration_s)
        log(f"  faults done; {len(produced)} produces acknowledged; draining")
        try:
            nemesis.cluster.up()  # every node that a fault left down
            workers.keep_running()
            with GroupMember(cluster.lb_url, config.topic, config.group, api_key=api_key) as m:
                _wait_drained(out_dir, produced, m, dead_letters)
                if config.redrive and any(p.poison for p in produced):
                    redrive = _redrive(nemesis.cluster, api_key, config, log)
                    _wait_drained(out_dir, produced, m, dead_letters, redriven=True)
        except WaitTimeoutError as exc:
            log(f"  {exc}")
    finally:
        workers.stop_all()
    ledgers = read_ledgers(out_dir)
    history = checker.LeaseHistory(
        produced=tuple(produced),
        received=ledgers.received,
        finished=ledgers.finished,
        settled=ledgers.settled,
        receive_calls=ledgers.receive_calls,
        visibility_timeout_ms=config.visibility_timeout_ms,
        outages=tuple(nemesis.outages),
        max_deliveries=config.max_deliveries,
        group=config.group,
        dead_letters=dead_letters.read() or (),
        power_cuts=tuple(cut.window for cut in cuts.records),
        redrive=redrive,
    )
    verdict = checker.check(history)
    report = LeaseReport(config, verdict, nemesis.records, len(produced), problems + cuts.problems)
    (out_dir / "report.txt").write_text("\n".join(report.lines()) + "\n", encoding="utf-8")
    return report


def run_fresh(
    directory: Path,
    base_port: int,
    config: LeaseConfig,
    out_dir: Path,
    log: Callable[[str], None] = print,
) -> LeaseReport:
    """One run on a fresh cluster in ``directory`` (emptied first). With power cuts, the
    cluster is on the power-cut disk whose backing directory is ``directory`` (the cluster
    in ``<mount>/cluster``), with frequent log compactions (a cut then finds group state in
    full dumps too); without FUSE that raises ``RuntimeError``, saying why."""
    if not config.power_cuts:
        with cluster_session(directory, base_port, log) as cluster:
            return run_lease(cluster, config, out_dir, log)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    with power_cut_cluster(directory, base_port, COMPACTION_LIMITS) as power:
        return run_lease(power.cluster, config, out_dir, log, power)


def _create_group(lb_url: str, api_key: str, config: LeaseConfig) -> None:
    """The run's topic, its dead-letter topic and its group."""
    with Admin(lb_url, api_key=api_key) as admin:
        admin.create_topic(config.topic, config.partitions, 3)
        admin.create_topic(config.dead_letter_topic, DEAD_LETTER_PARTITIONS, 3)
        admin.create_group(
            config.topic,
            config.group,
            visibility_timeout_ms=config.visibility_timeout_ms,
            max_deliveries=config.max_deliveries,
            dead_letter_topic=config.dead_letter_topic,
        )


@contextmanager
def _producing(
    lb_url: str,
    config: LeaseConfig,
    api_key: str,
    produced: list[checker.Produced],
    problems: list[str],
) -> Iterator[None]:
    """A producer thread through the load balancer until ``config.messages`` are
    acknowledged or the block ends; only acknowledged batches are recorded (a batch whose
    outcome stayed open may be stored: the checker does not require it). A producer that
    crashed is one of the run's ``problems``."""
    stop = threading.Event()

    def produce() -> None:
        with (
            Producer(lb_url, config.topic, api_key=api_key, direct=False) as producer,
            Admin(lb_url, api_key=api_key) as admin,
        ):
            sent = 0
            backlog = _Backlog(admin, config)
            while sent < config.messages and not stop.is_set():
                if backlog.full():
                    time.sleep(BACKLOG_PAUSE_S)
                    continue
                batch = [config.message(sent + i) for i in range(config.batch_messages)]
                sent += len(batch)
                produced.extend(
                    checker.Produced(
                        o.partition_id,
                        o.offset,
                        m.value,
                        poison=m.value.startswith(POISON_PREFIX),
                        headers=m.headers,
                    )
                    for o, m in _acknowledged(producer, batch, stop)
                )
                time.sleep(PRODUCE_PAUSE_S)

    def guarded() -> None:
        try:
            produce()
        except Exception as exc:  # a run whose producer died proves less: said, not hidden
            problems.append(f"producer crashed: {exc!r}")

    thread = threading.Thread(target=guarded, name="lease-producer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _acknowledged(
    producer: Producer, batch: list[NewMessage], stop: threading.Event
) -> list[tuple[PartitionOffset, NewMessage]]:
    """The messages of ``batch`` acknowledged, each with its offset. A batch the client
    retained after a failure (its outcome open) is resent with its sequence until answered
    or the run stops: the next ``produce_batch`` would resend it first and answer both
    batches' offsets at once (seen when a power cut took the load balancer down). A batch
    it dropped counts for the part its partitions acknowledged (``acked_in_batch``)."""
    send: Callable[[], list[PartitionOffset]] = partial(producer.produce_batch, batch)
    while True:  # bounded by the run: ``stop`` ends it
        try:
            return list(zip(send(), batch, strict=True))
        except ProduceError as exc:
            if not exc.retained or stop.is_set():
                parts = zip(exc.acked_in_batch, batch, strict=False)
                return [(offset, message) for offset, message in parts if offset is not None]
        except RaftQClientError:
            return []
        send = producer.flush
        time.sleep(BACKLOG_PAUSE_S)


class _Backlog:
    """The group's unsettled messages, asked at most every ``BACKLOG_PAUSE_S`` (a figure
    missing while a partition leader is down counts as nothing: the producer may overshoot
    by what it sends meanwhile)."""

    def __init__(self, admin: Admin, config: LeaseConfig) -> None:
        self._admin = admin
        self._config = config
        self._asked_s = 0.0
        self._full = False

    def full(self) -> bool:
        if time.monotonic() - self._asked_s >= BACKLOG_PAUSE_S:
            self._asked_s = time.monotonic()
            try:
                groups = self._admin.groups(self._config.topic)
            except RaftQClientError:
                return self._full
            lag = sum(g.lag_messages or 0 for g in groups if g.group == self._config.group)
            self._full = lag >= self._config.backlog_max
        return self._full


class _DeadLetters:
    """The group's dead-letter topic, read whole through the load balancer."""

    def __init__(self, cluster: LocalCluster, config: LeaseConfig, api_key: str) -> None:
        self._url = f"{cluster.lb_url}/logs"
        self._topic = config.dead_letter_topic
        self._session = client_session(api_key)

    def read(self) -> tuple[checker.DeadLetterCopy, ...] | None:
        """Every copy, or None when a partition did not answer."""
        found: list[checker.DeadLetterCopy] = []
        for partition_id in range(DEAD_LETTER_PARTITIONS):
            offset = 0
            while True:
                page = self._page(partition_id, offset)
                if page is None:
                    return None
                if not page:
                    break
                found.extend(_copy(message) for message in page)
                offset += len(page)
        return tuple(found)

    def _page(self, partition_id: int, offset: int) -> list[dict[str, Any]] | None:
        params: dict[str, str | int] = {
            "topic": self._topic,
            "partition_id": partition_id,
            "offset": offset,
            "max_messages": DEAD_LETTER_PAGE_MESSAGES,
        }
        try:
            answer = self._session.get(self._url, params=params, timeout=DEAD_LETTER_READ_S)
        except requests.RequestException:
            return None
        if answer.status_code != HTTPStatus.OK:
            return None
        messages: list[dict[str, Any]] = answer.json()["messages"]
        return messages


def _copy(message: dict[str, Any]) -> checker.DeadLetterCopy:
    headers: dict[str, str] = message["headers"]
    own = tuple(sorted((n, v) for n, v in headers.items() if not n.startswith("raftq-")))
    return checker.DeadLetterCopy(
        int(headers[dead_letters.ORIGIN_PARTITION]),
        int(headers[dead_letters.ORIGIN_OFFSET]),
        str(message["message"]),
        headers[dead_letters.GROUP],
        int(headers[dead_letters.DELIVERY_COUNT]),
        own,
    )


def _wait_drained(
    out_dir: Path,
    produced: list[checker.Produced],
    sweeper: GroupMember,
    dead_letters: _DeadLetters,
    redriven: bool = False,
) -> None:
    """Until every acknowledged produce shows acked in the ledgers, or is in the
    dead-letter topic (every poison message must be; once ``redriven``, acked too);
    meanwhile ``_sweep`` the others."""
    poison = {p.message for p in produced if p.poison}
    plain = {p.message for p in produced} - poison

    def drained() -> bool:
        ledgers = read_ledgers(out_dir)
        settled = {(s.partition_id, s.offset) for s in ledgers.settled if s.shows_settled}
        copies = dead_letters.read()
        dead = set() if copies is None else {copy.message for copy in copies}
        if redriven:
            dead = dead & settled  # a redriven poison message comes back to be acked
        if copies is not None and poison <= dead and plain <= settled | dead:
            return True
        _sweep(out_dir, ledgers, (plain | poison) - settled - dead, sweeper)
        return False

    what = "every redriven message acked" if redriven else "every acknowledged produce acked"
    poll_until(drained, DRAIN_WAIT_S, f"{what} by a worker", 1.0)


def _redrive(
    cluster: LocalCluster, api_key: str, config: LeaseConfig, log: Callable[[str], None]
) -> checker.Redrive:
    """Redrive the group's dead letters in two calls through the load balancer, the manager
    leader killed (kill -9, then started again) between them; calls that fail are made
    again (a redrive resumes where the last one stopped). The sums of the answers."""
    sent = now_ms()
    redriven = gone = 0
    with Admin(cluster.lb_url, api_key=api_key, limits=REDRIVE_CLIENT_LIMITS) as admin:
        first = poll_until(
            lambda: _redrive_once(admin, config, REDRIVE_FIRST_MESSAGES), REDRIVE_WAIT_S, "redrive"
        )
        redriven, gone = first.redriven, first.gone
        with node_session(cluster) as session:
            leader = poll_until(
                lambda: manager_leader(cluster, session), LEADER_WAIT_S, "a manager leader"
            )
        cluster.signal_node(leader, signal.SIGKILL)
        poll_until(lambda: not cluster.is_running(leader), WORKER_STOP_WAIT_S, leader)
        cluster.start_node(leader)
        more = first.more
        while more:
            done = poll_until(lambda: _redrive_once(admin, config, None), REDRIVE_WAIT_S, "redrive")
            redriven, gone, more = redriven + done.redriven, gone + done.gone, done.more
    log(f"  redrove {redriven} dead letters ({gone} gone), manager leader {leader} killed")
    return checker.Redrive(sent, now_ms(), redriven, gone)


def _redrive_once(admin: Admin, config: LeaseConfig, most: int | None) -> Redriven | None:
    try:
        return admin.redrive(config.topic, config.group, most)
    except RaftQClientError:
        return None  # the managers are electing: asked again


def _sweep(
    out_dir: Path, ledgers: Ledgers, unsettled: set[tuple[int, int]], sweeper: GroupMember
) -> None:
    """A worker killed between sending an ack and writing its answer leaves a settled
    message that no ledger shows settled. For each unsettled message whose last recorded
    delivery's lease has surely ended: ack that receipt again, writing the answer to the
    sweep's own ledger. ``already`` shows the lost ack acted; ``stale`` that the message
    waits for its next delivery (nothing changed). A lease that has ended cannot be acked
    ``done`` (it would be an ack of work nobody finished: ``acked_unfinished``)."""
    last: dict[tuple[int, int], checker.Received] = {}
    for received in ledgers.received:
        where = (received.partition_id, received.offset)
        if where in unsettled and (
            where not in last or received.delivery_count > last[where].delivery_count
        ):
            last[where] = received
    touched = {
        (s.partition_id, s.offset, s.delivery_count): s.at_ms
        for s in sorted(ledgers.settled, key=lambda s: s.at_ms)
        if s.action == "extend"
    }
    ended_ms = int(time.time() * 1000) - sweeper.visibility_timeout_ms - SWEEP_MARGIN_MS
    due = [
        r
        for r in last.values()
        if max(r.at_ms, touched.get((r.partition_id, r.offset, r.delivery_count), 0)) < ended_ms
    ]
    if not due:
        return
    sent = int(time.time() * 1000)
    try:
        answered = dict(sweeper.ack([r.receipt for r in due]))
    except RaftQClientError:
        return
    at = int(time.time() * 1000)
    with open(out_dir / "w-sweep.jsonl", "a", encoding="utf-8") as ledger:
        for r in due:
            line = {
                "kind": "settled",
                "worker": "sweep",
                "action": "ack",
                "partition_id": r.partition_id,
                "offset": r.offset,
                "delivery_count": r.delivery_count,
                "outcome": answered.get(r.receipt, "error"),
                "sent_ms": sent,
                "at_ms": at,
                "duration_ms": 0,
            }
            ledger.write(json.dumps(line) + "\n")


@dataclass(frozen=True, slots=True)
class Ledgers:
    received: tuple[checker.Received, ...]
    finished: tuple[checker.Finished, ...]
    settled: tuple[checker.Settled, ...]
    receive_calls: tuple[checker.ReceiveCall, ...] = ()


LedgerEvent = checker.Received | checker.Finished | checker.Settled | checker.ReceiveCall
LEDGER_KINDS: dict[str, type[LedgerEvent]] = {
    "received": checker.Received,
    "finished": checker.Finished,
    "settled": checker.Settled,
    "receive": checker.ReceiveCall,
}
"""A ledger line's ``kind`` (``lease_worker``) and the checker's event it records."""


def read_ledgers(out_dir: Path) -> Ledgers:
    """Every worker's ledger as the checker's events (a torn last line, from a kill -9 in
    the middle of a write, is skipped)."""
    events = [
        event
        for path in sorted(out_dir.glob("w*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if (event := _ledger_event(line)) is not None
    ]
    return Ledgers(
        tuple(e for e in events if isinstance(e, checker.Received)),
        tuple(e for e in events if isinstance(e, checker.Finished)),
        tuple(e for e in events if isinstance(e, checker.Settled)),
        tuple(e for e in events if isinstance(e, checker.ReceiveCall)),
    )


def _ledger_event(line: str) -> LedgerEvent | None:
    """One ledger line as the checker's event; None for a torn line (or a line's tail, read
    from where a look at a growing ledger began)."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(entry, dict):
        return None
    kind = LEDGER_KINDS.get(entry.pop("kind", None))
    return None if kind is None else kind(**entry)


def main(argv: list[str] | None = None) -> int:
    """``python -m stress_tests.lease_run --seed N [--power-cuts K]``: one run on a fresh
    local cluster (on the power-cut disk in ``--dir`` unless ``--power-cuts 0``)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--duration-s", type=float, default=120.0)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/raftq-lease-run"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/raftq-lease-report"))
    parser.add_argument("--base-port", type=int, default=BASE_PORT)
    parser.add_argument(
        "--power-cuts", type=int, default=3, help="whole-cluster power cuts (0: a plain disk)"
    )
    args = parser.parse_args(argv)
    config = LeaseConfig(
        args.seed, duration_s=args.duration_s, messages=100_000, power_cuts=args.power_cuts
    )
    report = run_fresh(args.dir, args.base_port, config, args.out)
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
