"""A stress session: a fresh local cluster in a directory, runs on it, and a summary. Shared
by ``stress``, ``stress_threaded`` and ``chaos`` (their command lines differ only in which
runs they ask for)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ops.cluster import LocalCluster
from stress_tests.network_partition import NetworkPartitioner, available
from stress_tests.runner import RunConfig, RunReport, run

DEFAULT_BASE_PORT = 29000
"""Clear of every test module's block (unit_tests/ports.py), so a fault tier can run beside
the test suite; with the power-loss run's offset it stays below the ephemeral range."""


@contextlib.contextmanager
def cluster_session(
    directory: Path,
    base_port: int,
    log: Callable[[str], None] = print,
    hosts: Sequence[str] | None = None,
    brokers: int | None = None,
    limits: Mapping[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """A running cluster in ``directory`` (emptied first); stopped, with any network fault
    removed, however the block ends. ``hosts``: one address per node (``--hosts``);
    ``brokers`` and ``limits``: as ``LocalCluster`` takes them (None: its defaults)."""
    shutil.rmtree(directory, ignore_errors=True)
    cluster = LocalCluster(
        directory, base_port=base_port, hosts=hosts, brokers=brokers, limits=limits, progress=log
    )
    partitions_possible = available() is None
    try:
        if partitions_possible:
            NetworkPartitioner(cluster).reset()
        cluster.up()
        yield cluster
    finally:
        if partitions_possible:
            NetworkPartitioner(cluster).reset()
        cluster.down()


def run_all(
    cluster: LocalCluster,
    configs: Sequence[RunConfig],
    out_dir: Path,
    log: Callable[[str], None] = print,
) -> list[RunReport]:
    reports = []
    for config in configs:
        reports.append(run(cluster, config, out_dir, log))
    for line in summary_lines(reports):
        log(line)
    return reports


def summary_lines(reports: Sequence[RunReport]) -> list[str]:
    out = ["== summary"]
    out += [
        f"  {'PASS' if r.passed else 'FAIL'} {r.name:<28} acked {r.acked:>6}  faults "
        f"{len(r.faults)}/{len(r.schedule)}  {r.duration_s:6.1f} s"
        for r in reports
    ]
    samples: dict[str, list[float]] = {}
    for report in reports:
        for fault in report.faults:
            if fault.failover_s is not None:
                samples.setdefault(fault.kind, []).append(fault.failover_s)
    for kind, values in sorted(samples.items()):
        out.append(
            f"  failover {kind:<26} p50 {statistics.median(values):.2f} s  "
            f"max {max(values):.2f} s  (n={len(values)})"
        )
    return out


def base_arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock")
    parser.add_argument("--base-port", type=int, default=DEFAULT_BASE_PORT)
    parser.add_argument("--dir", type=Path, default=None, help="cluster directory")
    parser.add_argument(
        "--out", type=Path, default=Path("stress-results"), help="where each run's JSON report goes"
    )
    return parser


def seed_or_clock(seed: int | None) -> int:
    return seed if seed is not None else int(time.time()) % 100_000


def work_dir(given: Path | None) -> Path:
    return given if given is not None else Path(tempfile.mkdtemp(prefix="raftq-stress-"))
