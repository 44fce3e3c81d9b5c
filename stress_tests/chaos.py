"""The tiers: ``python -m stress_tests.chaos --tier fast`` (what CI runs, a few minutes),
``python -m stress_tests.chaos --tier long`` (about 40 minutes: network partitions and mixed
chaos too, several seeds, then the power-loss run of ``power_loss.py`` on a cluster of its own
on the power-cut file system, then the membership tier, then a 3-minute at-least-once run of
a consumer group with 4 power cuts, ``lease_run.py``) and ``--tier membership`` (the
membership nemesis of ``nemesis.py``, several seeds, a fresh cluster each). One cluster per
tier (per seed for membership); exits 1 when any run fails."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from stress_tests.lease_run import BASE_PORT as LEASE_BASE_PORT
from stress_tests.lease_run import LeaseConfig, run_fresh
from stress_tests.membership_plan import MEMBERSHIP_LONG, MEMBERSHIP_LONG_SEEDS
from stress_tests.membership_run import MembershipConfig, membership_cluster, run_membership
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
MEMBERSHIP_BASE_PORT = 12_000
"""The membership tier's clusters (``--membership-base-port``): 12000 .. 12699 by default, room
for ``MEMBERSHIP_LONG.broker_ids_max`` brokers (broker ids only grow), below the ephemeral
range, clear of the tests' blocks and of the other tiers'."""
LEASE_LONG_S = 180.0
LEASE_LONG_MESSAGES = 50_000
LEASE_LONG_POWER_CUTS = 4
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
    parser.add_argument("--tier", choices=("fast", "long", "membership"), default="fast")
    parser.add_argument("--membership-base-port", type=int, default=MEMBERSHIP_BASE_PORT)
    args = parser.parse_args(argv)
    seed = seed_or_clock(args.seed)
    print(f"tier {args.tier}, seed {seed} (replay with --seed {seed})", flush=True)
    directory = work_dir(args.dir)
    if args.tier == "membership":
        port = args.membership_base_port
        return 0 if membership_tier(seed, port, directory, args.out / args.tier) else 1
    configs = fast_configs(seed) if args.tier == "fast" else long_configs(seed)
    with cluster_session(directory, args.base_port) as cluster:
        reports = run_all(cluster, configs, args.out / args.tier)
    passed = True
    if args.tier == "long":
        reports.append(power_loss(seed, args.base_port, directory, args.out / args.tier))
        for line in summary_lines(reports):
            print(line)
        port = args.membership_base_port
        passed = membership_tier(seed, port, directory, args.out / args.tier)
        passed = lease_tier(seed, directory, args.out / args.tier) and passed
    return 0 if passed and all(r.passed for r in reports) else 1


def lease_tier(seed: int, directory: Path, out_dir: Path) -> bool:
    """The consumer group's at-least-once run (issue 20), long, with power cuts, on a fresh
    cluster on the power-cut disk."""
    config = LeaseConfig(
        seed,
        duration_s=LEASE_LONG_S,
        messages=LEASE_LONG_MESSAGES,
        power_cuts=LEASE_LONG_POWER_CUTS,
    )
    disk_dir = directory.with_name(f"{directory.name}-lease-{seed}")
    report = run_fresh(disk_dir, LEASE_BASE_PORT, config, out_dir / f"lease-{seed}")
    for line in report.lines():
        print(line)
    return report.passed


def membership_tier(seed: int, base_port: int, directory: Path, out_dir: Path) -> bool:
    """``MEMBERSHIP_LONG`` over several seeds, one after another, each on a fresh cluster
    (broker ids only grow); True when every run passed."""
    reports = []
    for offset in MEMBERSHIP_LONG_SEEDS:
        config = MembershipConfig(MEMBERSHIP_LONG, seed + offset)
        cluster_dir = directory.with_name(f"{directory.name}-membership-{seed + offset}")
        with membership_cluster(cluster_dir, base_port) as cluster:
            reports.append(run_membership(cluster, config, out_dir))
    print("== membership summary")
    for r in reports:
        ops = sum(1 for op in r.ops if op.outcome != "failed")
        print(
            f"  {'PASS' if r.passed else 'FAIL'} {r.name} seed={r.seed}: acked {r.acked}, "
            f"operations {ops}/{len(r.schedule)}, {r.duration_s:.1f} s"
        )
    return all(r.passed for r in reports)


def power_loss(seed: int, base_port: int, directory: Path, out_dir: Path) -> RunReport:
    """The power-loss run, after the tier's cluster is down (its own cluster and disk)."""
    disk_dir = directory.with_name(directory.name + "-power-loss")
    port = base_port + POWER_LOSS_PORT_OFFSET
    return run_power_loss(seed, POWER_LOSS_CYCLES, port, disk_dir, out_dir)


if __name__ == "__main__":
    sys.exit(main())
