"""The tiers: ``python -m stress_tests.chaos --tier fast`` (what CI runs, a few minutes) and
``python -m stress_tests.chaos --tier long`` (about 15 minutes: network partitions and mixed
chaos too, several seeds, then the power-loss run of ``power_loss.py`` on a cluster of its own
on the power-cut file system). One cluster per tier; exits 1 when any run fails."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from stress_tests.power_loss import run_long as run_power_loss
from stress_tests.runner import RunConfig, RunReport
from stress_tests.scheduler import FaultPlan
from stress_tests.session import (
    base_arguments,
    cluster_session,
    run_all,
    seed_or_clock,
    summary_lines,
    work_dir,
)
from stress_tests.tiers import (
    FAST_TIER,
    LONG_TIER_EXTRA_CHAOS_SEEDS,
    LONG_TIER_PLANS,
    LONG_TIER_SEEDS,
    MIXED_CHAOS,
)

POWER_LOSS_PORT_OFFSET = 2_100
"""The long tier's power-loss cluster: base + 2100 .. base + 2499 (23100.. by default, the
block of ``python -m stress_tests.power_loss``), clear of the tier's own and the tests'."""
POWER_LOSS_CYCLES = 8
FAST_MESSAGES_TARGET = 3_000
"""Enough above the 1,000-message validity floor, small enough for the CI time budget."""


def fast_configs(seed: int) -> list[RunConfig]:
    return [fast_config(plan, seed) for plan in FAST_TIER]


def fast_config(plan: FaultPlan, seed: int) -> RunConfig:
    return RunConfig(plan, seed, messages_target=FAST_MESSAGES_TARGET, duration_s_max=90.0)


def long_configs(seed: int) -> list[RunConfig]:
    seeds = [seed + s for s in LONG_TIER_SEEDS]
    configs = [RunConfig(plan, s, duration_s_max=150.0) for s in seeds for plan in LONG_TIER_PLANS]
    configs += [
        RunConfig(MIXED_CHAOS, seed + s, duration_s_max=150.0) for s in LONG_TIER_EXTRA_CHAOS_SEEDS
    ]
    return configs


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_arguments(__doc__ or "")
    parser.add_argument("--tier", choices=("fast", "long"), default="fast")
    args = parser.parse_args(argv)
    seed = seed_or_clock(args.seed)
    print(f"tier {args.tier}, seed {seed} (replay with --seed {seed})", flush=True)
    configs = fast_configs(seed) if args.tier == "fast" else long_configs(seed)
    directory = work_dir(args.dir)
    with cluster_session(directory, args.base_port) as cluster:
        reports = run_all(cluster, configs, args.out / args.tier)
    if args.tier == "long":
        reports.append(power_loss(seed, args.base_port, directory, args.out / args.tier))
        for line in summary_lines(reports):
            print(line)
    return 0 if all(r.passed for r in reports) else 1


def power_loss(seed: int, base_port: int, directory: Path, out_dir: Path) -> RunReport:
    """The power-loss run, after the tier's cluster is down (its own cluster and disk)."""
    disk_dir = directory.with_name(directory.name + "-power-loss")
    port = base_port + POWER_LOSS_PORT_OFFSET
    return run_power_loss(seed, POWER_LOSS_CYCLES, port, disk_dir, out_dir)


if __name__ == "__main__":
    sys.exit(main())
