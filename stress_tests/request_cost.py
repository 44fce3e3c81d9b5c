"""The cost of one request (issue 24): the benchmark's single-message produce rows, run
against a cluster that stays up, with the CPU each process spent per request.

    .venv/bin/raftq cluster up --dir /tmp/c --base-port 23100
    .venv/bin/python -m stress_tests.request_cost --dir /tmp/c [--rounds 3] [--seconds 5]
        [--only "leader broker"] [--profile-dir /tmp/profiles]

The four rows are the benchmark's own (``bench_scenarios.produce_via_lb`` and
``produce_direct``: 100-byte messages, one per request, each answer awaited, the cluster's
admin API key on every request), run ``--rounds`` times in turn so that a drift of the
shared machine lands on every row alike; the table gives each row's median over the rounds.
Beside the figures, the CPU time (user + system, from ``/proc/<pid>/stat``) each process
spent per request: the load balancer, each manager, each broker (the partition's leader
marked), and this client, less what each spends idle (measured first, for as long as one
row). With ``--profile-dir``, py-spy records every node during each row of the first round
and this client (``<row>-<process>.txt``: collapsed stacks of the thread holding the GIL, by
thread name, at 100 Hz; py-spy costs CPU itself, so those rows' figures are not comparable
with the others').

Not a test: it prints, and only its figures are kept (ARCHITECTURE.md, "Performance").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ops.cluster import LocalCluster
from stress_tests.bench_http import create_topic, leader_address
from stress_tests.bench_load import MakeStep, run_load
from stress_tests.bench_memory import cpu_ticks
from stress_tests.bench_scenarios import produce_direct, produce_via_lb
from stress_tests.credentials import bearer, client_session, require_admin_key

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
TOPIC = "request-cost"
"""One partition, made by the first run and kept: a new topic per run would add partitions
for the managers' leader balance to move while a row runs."""
SELF = "client"
"""The name this process's own CPU is reported under."""


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    threads: int
    make: MakeStep


@dataclass
class Figures:
    """One row's measurements over the rounds."""

    msgs_per_s: list[float] = field(default_factory=list)
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    cpu_us_per_request: dict[str, list[float]] = field(default_factory=dict)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stress_tests.request_cost")
    parser.add_argument("--dir", required=True, type=Path, help="a running cluster's directory")
    parser.add_argument("--seconds", type=float, default=5.0, help="per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="rows whose name contains this")
    parser.add_argument("--profile-dir", type=Path, help="py-spy every node, first round")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds <= 0:
        parser.error("--seconds and --rounds must be positive")
    return args


def probes(lb: str, api_key: str, leader: str | None) -> list[Probe]:
    via_lb = produce_via_lb(lb, bearer(api_key), TOPIC, 1)
    direct = produce_direct(leader, api_key, TOPIC, 0)
    return [
        Probe("produce 1/req via LB, 1 thread", 1, via_lb),
        Probe("produce 1/req via LB, 8 threads", 8, via_lb),
        Probe("produce 1/req to leader broker, 1 thread", 1, direct),
        Probe("produce 1/req to leader broker, 8 threads", 8, direct),
    ]


def cpu_s(pid: int) -> float:
    """User + system CPU of a process so far (its threads included); ``ProcessLookupError``
    (an ``OSError``) when it is gone."""
    ticks = cpu_ticks(pid)
    if ticks is None:
        raise ProcessLookupError(f"no process {pid}")
    return ticks / CLOCK_TICKS_PER_S


def cpu_all(pids: Mapping[str, int]) -> dict[str, float]:
    return {name: cpu_s(pid) for name, pid in pids.items()}


def node_pids(cluster: LocalCluster, leader: str | None) -> dict[str, int]:
    """Every running node's pid by name (the partition's leader broker marked), and ours."""
    pids: dict[str, int] = {}
    for name in cluster.node_names:
        pid = cluster.pid(name)
        if pid is None:
            continue
        leads = leader is not None and cluster.node(name).http_address == leader
        pids[f"{name} (leader)" if leads else name] = pid
    pids[SELF] = os.getpid()
    return pids


@contextlib.contextmanager
def profiled(pids: Mapping[str, int], seconds: float, out: Path | None, row: str) -> Iterator[None]:
    """py-spy ``record`` on every process for the row's duration (nothing when ``out`` is
    None)."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    stem = row.replace(" ", "_").replace("/", "-").replace(",", "")
    spy = Path(sys.executable).with_name("py-spy")
    started = [
        subprocess.Popen(
            [
                str(spy),
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(round(seconds)),
                "--rate",
                "100",
                "--threads",
                "--gil",
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(out / f"{stem}-{name.split()[0]}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in pids.items()
    ]
    try:
        yield
    finally:
        for spy_process in started:
            spy_process.wait(timeout=seconds + 30)


def measure(
    probe: Probe, seconds: float, pids: Mapping[str, int], idle_s: Mapping[str, float]
) -> tuple[float, float, float, dict[str, float]]:
    """msgs/s, p50 ms, p99 ms, and CPU microseconds per request by process, idle less."""
    before, started_s = cpu_all(pids), time.monotonic()
    tally = run_load(probe.threads, seconds, probe.make)
    elapsed_s, after = time.monotonic() - started_s, cpu_all(pids)
    row = tally.row("raftq", probe.name)
    if row.msgs_per_s is None or row.p50_ms is None or row.p99_ms is None:
        raise RuntimeError(f"{probe.name}: {row.error}")
    requests_done = max(1, len(tally.latencies_s))
    per_request = {
        name: max(0.0, after[name] - before[name] - idle_s[name.split()[0]] * elapsed_s)
        / requests_done
        * 1e6
        for name in pids
    }
    return row.msgs_per_s, row.p50_ms, row.p99_ms, per_request


def idle_rates(pids: Mapping[str, int], seconds: float) -> dict[str, float]:
    """CPU seconds per second each process spends with no request (Raft heartbeats, the
    managers' polls, the LB's leader tracker)."""
    before = cpu_all(pids)
    time.sleep(seconds)
    after = cpu_all(pids)
    return {name: (after[name] - before[name]) / seconds for name in pids}


def report(figures: Mapping[str, Figures], write: Callable[[str], None]) -> None:
    for name, fig in figures.items():
        write(
            f"{name}: {statistics.median(fig.msgs_per_s):,.0f} msgs/s, "
            f"p50 {statistics.median(fig.p50_ms):.2f} ms, "
            f"p99 {statistics.median(fig.p99_ms):.2f} ms "
            f"(msgs/s per round: {', '.join(f'{v:,.0f}' for v in fig.msgs_per_s)})"
        )
        total = 0.0
        for process, values in fig.cpu_us_per_request.items():
            cpu_us = statistics.median(values)
            total += cpu_us
            write(f"    {process:20} {cpu_us:7.0f} us CPU per request")
        write(f"    {'all processes':20} {total:7.0f} us CPU per request")


def run_round(
    cluster: LocalCluster,
    api_key: str,
    args: argparse.Namespace,
    figures: dict[str, Figures],
    idle_s: Mapping[str, float],
    profile_dir: Path | None,
) -> None:
    """Every chosen row once. The partition's leader is looked up again each round: the
    managers' leader balance may move it (``manager/leader_balance.py``)."""
    with client_session(api_key) as session:
        leader = leader_address(session, cluster.lb_url, TOPIC, 0)
    pids = node_pids(cluster, leader)
    for probe in probes(cluster.lb_url, api_key, leader):
        if args.only not in probe.name:
            continue
        print(f"  {probe.name} (leader {leader}) ...", file=sys.stderr, flush=True)
        with profiled(pids, args.seconds, profile_dir, probe.name):
            msgs, p50, p99, per_request = measure(probe, args.seconds, pids, idle_s)
        fig = figures.setdefault(probe.name, Figures())
        fig.msgs_per_s.append(msgs)
        fig.p50_ms.append(p50)
        fig.p99_ms.append(p99)
        for process, cpu_us in per_request.items():
            role = "broker (leader)" if process.endswith("(leader)") else process
            fig.cpu_us_per_request.setdefault(role, []).append(cpu_us)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cluster = LocalCluster(args.dir)
    api_key = require_admin_key(cluster)
    with client_session(api_key) as session:
        create_topic(session, cluster.lb_url, TOPIC, 1)  # an earlier run's topic is kept
    pids = node_pids(cluster, None)
    print(f"idle CPU for {args.seconds:g} s ...", file=sys.stderr, flush=True)
    idle_s = idle_rates(pids, args.seconds)
    figures: dict[str, Figures] = {}
    for round_index in range(args.rounds):
        print(f"round {round_index + 1}:", file=sys.stderr, flush=True)
        profile_dir = args.profile_dir if round_index == 0 else None
        run_round(cluster, api_key, args, figures, idle_s, profile_dir)
    report(figures, print)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
