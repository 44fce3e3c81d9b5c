"""Benchmark: one command, its own RaftQ cluster (and, with ``--peers``, NATS JetStream and
RabbitMQ clusters), one table.

    .venv/bin/python -m stress_tests.benchmark [--seconds 5] [--backlog 200000] [--peers]

Throughput and latency per scenario, redelivery after kill -9 of a consumer group's member,
failover after kill -9 of a partition leader, a replica's catch-up after a backlog,
resident memory of every process in each phase, and RaftQ's ratio to each peer per
comparable scenario. All figures come from the same run on the same machine; across runs
the machine's noise dominates, so compare within one table. Progress goes to stderr, the
table to stdout. Everything started is stopped at the end, also on Ctrl-C, SIGTERM or an
error. RaftQ's clients use the admin API key ``up`` makes, so every
measured request pays for its check, as a real client's does.
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
    bench_scenarios,
)
from stress_tests.bench_memory import MemorySampler
from stress_tests.bench_report import RAFTQ, MemoryRow, Row, render
from stress_tests.credentials import require_admin_key
from stress_tests.peers.run import run_peers
from stress_tests.polling import poll_until

BASE_PORT = 22100
"""RaftQ's ports: 22100..22499 (clear of the tests' 17500-22099 and the peers' ports)."""
PHASES = ("idle", "load", "backlog", "catch-up")
ONLY = ("async-producer",)
"""``--only``'s choices: ``async-producer`` is the asynchronous producer's row (issue 24)."""
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
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.backlog <= 0 or args.failovers < 0:
        parser.error("--seconds and --backlog must be positive, --failovers at least 0")
    if args.backlog_timeout is None:
        args.backlog_timeout = max(300.0, args.backlog / 1000)
    return args


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
    if args.only == "async-producer":
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

    peer_lines: list[str] = []
    try:
        with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="raftq-bench-") as tmp:
            rows, memory = run_raftq(args, Path(tmp) / "raftq", log)
            if args.peers:
                peer_rows, peer_memory, peer_lines = run_peers(
                    args.seconds, Path(tmp), log, only=args.only
                )
                rows, memory = rows + peer_rows, memory + peer_memory
    except KeyboardInterrupt:
        log("interrupted: every process the benchmark started is stopped")
        return 130
    print(render(title(args, peer_lines), rows, memory, PHASES), flush=True)
    return 0 if all(row.error is None for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
