"""Benchmark: one command, its own RaftQ cluster (and, with ``--peers``, NATS JetStream and
RabbitMQ clusters), one table.

    .venv/bin/python -m stress_tests.benchmark [--seconds 5] [--backlog 200000] [--peers]
    .venv/bin/python -m stress_tests.benchmark --only partition-scaling [--idle-window 10]

Throughput and latency per scenario, redelivery after kill -9 of a consumer group's member,
failover after kill -9 of a partition leader, a replica's catch-up after a backlog,
resident memory of every process in each phase, RaftQ's ratio to each peer per
comparable scenario, and the partition-scaling table (issue 22: idle CPU, RSS, threads and
one message's p50 of a fresh cluster holding 3 to 100 partitions; ``bench_scaling``). All
figures come from the same run on the same machine; across runs the machine's noise
dominates, so compare within one table. Progress goes to stderr, the tables to stdout.
Everything started is stopped at the end, also on Ctrl-C, SIGTERM or an error. RaftQ's
clients use the admin API key ``up`` makes, so every measured request pays for its check,
as a real client's does.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType

from ops.cluster import LocalCluster
from stress_tests import (
    bench_async,
    bench_faults,
    bench_latency,
    bench_redelivery,
    bench_scaling,
    bench_scenarios,
)
from stress_tests.bench_memory import MemorySampler
from stress_tests.bench_report import RAFTQ, MemoryRow, Row, ScalingRow, render, render_scaling
from stress_tests.credentials import require_admin_key
from stress_tests.peers.run import run_peers
from stress_tests.polling import poll_until

BASE_PORT = 22100
"""RaftQ's ports: 22100..22499 (clear of the tests' 17500-22099 and the peers' ports)."""
PHASES = ("idle", "load", "backlog", "catch-up")
ASYNC_PRODUCER = "async-producer"
PARTITION_SCALING = "partition-scaling"
ONLY = (ASYNC_PRODUCER, PARTITION_SCALING)
"""``--only``'s choices: ``async-producer`` is the asynchronous producer's row (issue 24),
``partition-scaling`` the partition-scaling table alone (issue 22; no peer has one)."""
IDLE_SAMPLES = 3
Log = Callable[[str], None]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stress_tests.benchmark")
    parser.add_argument("--seconds", type=float, default=5.0, help="per scenario (default 5)")
    parser.add_argument("--backlog", type=int, default=200_000, help="messages (default 200000)")
    parser.add_argument(
        "--backlog-timeout",
        type=float,
        default=None,
        help="bound on producing the backlog and, separately, on the catch-up (s; default "
        "300 or 1 ms per message, whichever is longer)",
    )
    parser.add_argument("--failovers", type=int, default=3, help="kill -9s (default 3)")
    parser.add_argument("--peers", action="store_true", help="also NATS JetStream and RabbitMQ")
    parser.add_argument("--base-port", type=int, default=BASE_PORT)
    parser.add_argument("--db-url", help="PostgreSQL URL for the brokers (default SQLite)")
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="run only these rows (RaftQ's and, with --peers, the peers' comparable ones)",
    )
    add_scaling_args(parser)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.backlog <= 0 or args.failovers < 0:
        parser.error("--seconds and --backlog must be positive, --failovers at least 0")
    if args.idle_window <= 0 or args.scaling_produces <= 0:
        parser.error("--idle-window and --scaling-produces must be positive")
    try:
        bench_scaling.topic_steps(args.scaling_partitions)
    except ValueError as exc:
        parser.error(f"--scaling-partitions: {exc}")
    if args.backlog_timeout is None:
        args.backlog_timeout = max(300.0, args.backlog / 1000)
    return args


def partition_counts(text: str) -> tuple[int, ...]:
    """``--scaling-partitions``' value: comma-separated partition counts."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text!r}") from None


def add_scaling_args(parser: argparse.ArgumentParser) -> None:
    default_counts = ",".join(str(count) for count in bench_scaling.PARTITION_COUNTS)
    parser.add_argument(
        "--idle-window",
        type=float,
        default=bench_scaling.IDLE_WINDOW_S,
        help=f"partition scaling: idle CPU window per row (s; default "
        f"{bench_scaling.IDLE_WINDOW_S:g})",
    )
    parser.add_argument(
        "--scaling-partitions",
        type=partition_counts,
        default=bench_scaling.PARTITION_COUNTS,
        help=f"partition scaling: the rows' partition counts (default {default_counts}; "
        "a broker holds at most 100)",
    )
    parser.add_argument(
        "--scaling-produces",
        type=int,
        default=bench_scaling.PRODUCES,
        help=f"partition scaling: timed produces per row (default {bench_scaling.PRODUCES})",
    )


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C, so every ``finally`` stops what it started."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_raftq(
    args: argparse.Namespace, directory: Path, log: Log
) -> tuple[list[Row], list[MemoryRow]]:
    """Start the cluster, run every RaftQ scenario on it, stop it."""
    cluster = LocalCluster(directory, base_port=args.base_port, db_url=args.db_url, progress=log)
    sampler = MemorySampler(lambda: {name: cluster.pid(name) for name in cluster.node_names})
    try:
        log(f"starting RaftQ (7 processes, ports {args.base_port}+) in {directory}")
        cluster.up()
        sampler.start()
        rows = raftq_rows(cluster, sampler, args, log)
    finally:
        sampler.stop()
        cluster.down()
    return rows, sampler.rows()


def run_scaling(args: argparse.Namespace, directory: Path, log: Log) -> list[ScalingRow]:
    """A fresh cluster of its own (the other scenarios' topics and backlog would blur the
    idle figures), on the same ports: it starts once the other one is down."""
    cluster = LocalCluster(directory, base_port=args.base_port, db_url=args.db_url, progress=log)
    plan = bench_scaling.Plan(args.scaling_partitions, args.idle_window, args.scaling_produces)
    try:
        log(f"starting RaftQ for partition scaling (ports {args.base_port}+) in {directory}")
        cluster.up()
        return bench_scaling.measure(cluster, plan, log)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:160]
        return [ScalingRow(plan.counts[0], error=error)]
    finally:
        cluster.down()


def scaling_title(args: argparse.Namespace, load_at_start: float) -> str:
    return (
        f"Partition scaling: 3 brokers, every partition replicated 3 ways, no traffic; per "
        f"broker (mean of the 3); idle CPU over {args.idle_window:g} s as a share of one core; "
        f"p50 of {args.scaling_produces} single-message produces to one partition (Producer); "
        f"the machine's load average {load_at_start:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )


def raftq_rows(
    cluster: LocalCluster, sampler: MemorySampler, args: argparse.Namespace, log: Log
) -> list[Row]:
    lb, api_key = cluster.lb_url, require_admin_key(cluster)
    topics = bench_scenarios.make_topics(lb, api_key)
    poll_until(lambda: sampler.count("idle") >= IDLE_SAMPLES, 30.0, "idle memory samples")
    sampler.set_phase("load")
    log("RaftQ scenarios:")
    log(f"  {bench_async.SCENARIO} ...")
    produced = functools.partial(bench_async.measure, lb, api_key, topics.three, args.seconds)
    asynchronous = guarded(bench_async.SCENARIO, lambda: [produced()])
    if args.only == ASYNC_PRODUCER:
        return asynchronous
    rows = asynchronous + bench_scenarios.throughput_rows(lb, api_key, topics, args.seconds, log)
    log(f"  {bench_latency.SCENARIO} ...")
    latency = functools.partial(bench_latency.measure, lb, api_key, topics.one, args.seconds)
    rows += guarded(bench_latency.SCENARIO, lambda: [latency()])
    log(f"  {bench_latency.STREAM_SCENARIO} ...")
    streamed = functools.partial(
        bench_latency.measure_stream, lb, api_key, topics.one, args.seconds
    )
    rows += guarded(bench_latency.STREAM_SCENARIO, lambda: [streamed()])
    log(f"  {bench_redelivery.SCENARIO.name} ...")
    redelivered = functools.partial(bench_redelivery.measure, lb, api_key, args.seconds, log)
    rows += guarded(bench_redelivery.SCENARIO.name, redelivered)
    if args.failovers > 0:
        rows.append(bench_faults.failover_row(cluster, topics.one, args.failovers, log))
    backlog = functools.partial(
        bench_faults.backlog_rows, cluster, sampler, args.backlog, args.backlog_timeout, log
    )
    return rows + guarded("backlog and catch-up", backlog)


def guarded(name: str, scenario: Callable[[], list[Row]]) -> list[Row]:
    """The scenario's rows, or one FAILED row saying why it could not run: one broken
    scenario does not cost the figures of the others."""
    try:
        return scenario()
    except Exception as exc:
        return [Row(RAFTQ, name, error=f"{type(exc).__name__}: {exc}"[:160])]


def title(args: argparse.Namespace, peer_lines: Sequence[str]) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"RaftQ benchmark, {now}: {args.seconds:g} s per scenario, {os.cpu_count()} CPUs, "
        f"brokers on {'PostgreSQL' if args.db_url else 'SQLite'}, 100-byte messages, "
        f"backlog {args.backlog:,}",
        *peer_lines,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="raftq-bench-") as tmp:
            if args.only == PARTITION_SCALING:
                return scaling_table(args, Path(tmp) / "scaling", log)
            rows, memory, peer_lines = run_all(args, Path(tmp), log)
            print(render(title(args, peer_lines), rows, memory, PHASES), flush=True)
            failed = any(row.error is not None for row in rows)
            if args.only is None:
                print()
                failed |= scaling_table(args, Path(tmp) / "scaling", log) != 0
    except KeyboardInterrupt:
        log("interrupted: every process the benchmark started is stopped")
        return 130
    return 1 if failed else 0


def run_all(
    args: argparse.Namespace, tmp: Path, log: Log
) -> tuple[list[Row], list[MemoryRow], list[str]]:
    """RaftQ's rows and memory, then (``--peers``) the peers'."""
    rows, memory = run_raftq(args, tmp / "raftq", log)
    peer_lines: list[str] = []
    if args.peers:
        peer_rows, peer_memory, peer_lines = run_peers(args.seconds, tmp, log, only=args.only)
        rows, memory = rows + peer_rows, memory + peer_memory
    return rows, memory, peer_lines


def scaling_table(args: argparse.Namespace, directory: Path, log: Log) -> int:
    """Measure and print the partition-scaling table; 1 when a row failed."""
    load_at_start = os.getloadavg()[0]
    rows = run_scaling(args, directory, log)
    print(render_scaling(scaling_title(args, load_at_start), rows), flush=True)
    return 0 if all(row.error is None for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
