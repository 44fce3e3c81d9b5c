"""The deterministic Raft simulator (``runtime/replication/raft/sim``) driving a real
replicated state: by default a partition, ``PartitionLog`` through its ``Definition``
(``broker/partition/raft.py``), with a workload of appends, pops and flush marks; with
``--workload manager`` the managers' registry (``stress_tests/manager_sim.py``). A failing
seed replays exactly and prints its trace.

    python -m stress_tests.raft_sim --seeds 500            # seeds 1..500
    python -m stress_tests.raft_sim --seed 42 --trace      # one seed, its whole trace
    python -m stress_tests.raft_sim --first 1000 --seeds 100 --steps 600
    python -m stress_tests.raft_sim --workload manager --seeds 200

Here rather than in ``runtime``: the workloads are the components' states, and ``runtime``
imports no component (import-linter).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from broker.partition.commands import Append, Command, Consume, MarkFlushed
from broker.partition.log import PartitionLog
from broker.partition.raft import (
    PARTITION_METHODS,
    GroupApplied,
    partition_definition,
)
from manager.replica_mover import _slot_to_move
from protocol.limits import Limits
from protocol.types import Offset, ReplicaId
from runtime.replication.machine import Definition, Entry, ReplicatedMethod
from runtime.replication.raft.sim.checks import fingerprint
from runtime.replication.raft.sim.network import NetworkFaults
from runtime.replication.raft.sim.operations import World
from runtime.replication.raft.sim.simulation import SimConfig, SimResult, Simulation, Workload
from stress_tests.manager_sim import manager_workload
from stress_tests.sim_moves import Moves, SlotToMove, moves_limits

REPLICAS = 3
PartitionDefinition = Definition[PartitionLog, Sequence[Command], GroupApplied]


def partition_workload() -> Workload[PartitionLog, Sequence[Command], GroupApplied]:
    limits = Limits()
    definition = partition_definition(REPLICAS, limits.partition_limits(), 50)
    return Workload(
        definition=definition,
        command=partition_commands,
        entry_of=_entry_of,
        fingerprint=fingerprint,
        broken_definition=_diverging(definition),
    )


def moves_workload(
    slot_to_move: SlotToMove = _slot_to_move, host_first: bool = True
) -> Workload[PartitionLog, Sequence[Command], GroupApplied]:
    """The partition with each replica's flusher and database, brokers lost and drained,
    and re-replication (``stress_tests/sim_moves.py``); appends and pops are proposed, the
    flushers make the flush marks. The arguments put back code from before a fix."""
    limits = moves_limits()

    def operations(world: World[PartitionLog, Sequence[Command], GroupApplied]) -> Moves:
        return Moves(world, limits, slot_to_move, host_first)

    return Workload(
        definition=partition_definition(REPLICAS, limits.partition_limits(), 50),
        command=lambda rng, number: partition_commands(rng, number, marks=False),
        entry_of=_entry_of,
        fingerprint=fingerprint,
        operations=operations,
    )


def partition_commands(rng: random.Random, number: int, *, marks: bool = True) -> Sequence[Command]:
    """One to three commands, as a broker's group commit would group them; the step's
    number stands for the proposer's clock. ``marks``: some are flush marks of a random
    replica (else appends and pops only)."""
    timestamp_ms = 1_000 + 20 * number
    commands: list[Command] = []
    for part in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.6:
            messages = tuple(
                (f"k{rng.randrange(4)}", f"v{number}.{part}.{i}") for i in range(rng.randint(1, 3))
            )
            commands.append(Append(messages, timestamp_ms, None, None))
        elif roll < 0.85 or not marks:
            consumer = f"c{rng.randrange(2)}"
            commands.append(Consume(consumer, rng.randint(1, 4), f"r{number}.{part}", timestamp_ms))
        else:
            replica = ReplicaId(rng.randrange(REPLICAS))
            commands.append(MarkFlushed(replica, Offset(rng.randrange(8 * number + 1))))
    return commands


def _entry_of(applied: GroupApplied) -> Entry:
    return applied[1]


def _diverging(definition: PartitionDefinition) -> PartitionDefinition:
    """The broken variant: the same method table, but ``run_group`` applies one more append
    (a replica that applies a different entry)."""

    def run_group(log: PartitionLog, wires: object) -> object:
        applied = definition.method("run_group").apply(log, wires)
        log.apply(Append((("k", "extra"),), log.clock_ms, None, None))
        return applied

    methods = tuple(
        ReplicatedMethod(m.name, run_group, m.synced, m.version) if m.name == "run_group" else m
        for m in PARTITION_METHODS
    )
    return dataclasses.replace(definition, methods=methods)


WORKLOADS: dict[str, Callable[[], Workload[Any, Any, Any]]] = {
    "partition": partition_workload,
    "manager": manager_workload,
    "moves": moves_workload,
}
"""The workloads by name; each call makes a fresh one (a run's workload may keep state)."""


PROFILES: dict[str, dict[str, object]] = {
    "moves": {"operate_p": 0.03, "member_change_p": 0.0, "compact_p": 0.03, "settle_steps": 600},
    "moves-unsynced": {
        "operate_p": 0.03,
        "settle_steps": 600,
        "member_change_p": 0.0,
        "compact_p": 0.03,
        "unsynced_p": 0.3,
        "crash_p": 0.0,
    },
}
"""A workload's own settings, under its name. ``moves-unsynced``: a third of the appends
``replicated`` (journals take them without a sync; a flusher sees them committed but not
yet durable), and no crash but the moves' lost brokers, since a crash of two holders before
the next sync may lose a committed unsynced entry by design, which the checks would take
for a changed committed entry."""


def run_seed(
    seed: int, workload: str = "partition", profile: str | None = None, **overrides: object
) -> SimResult:
    settings = {**PROFILES.get(profile or workload, {}), **overrides}
    config = dataclasses.replace(SimConfig(seed=seed), **settings)  # type: ignore[arg-type]
    return Simulation(WORKLOADS[workload](), config).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="run this seed only")
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="partition",
        help="what the group replicates",
    )
    parser.add_argument("--first", type=int, default=1, help="first seed of the range")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds")
    parser.add_argument("--steps", type=int, default=SimConfig(seed=0).steps)
    parser.add_argument("--trace", action="store_true", help="print every run's trace")
    parser.add_argument(
        "--in-order", action="store_true", help="links deliver in order, as TCP (no duplicates)"
    )
    parser.add_argument(
        "--member-change-p",
        type=float,
        help="chance per step of a membership change (0.08: the membership profile)",
    )
    parser.add_argument(
        "--profile", choices=sorted(PROFILES), help="settings by name (default: the workload's)"
    )
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {"steps": args.steps}
    if args.member_change_p is not None:
        overrides["member_change_p"] = args.member_change_p
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failed: list[int] = []
    started_s = time.monotonic()
    for seed in seeds:
        faults = NetworkFaults(in_order=args.in_order)
        result = run_seed(seed, args.workload, args.profile, faults=faults, **overrides)
        if args.trace or result.violation:
            print(result.trace_text())
        if result.violation:
            failed.append(seed)
            print(f"seed {seed} FAILED: {result.violation}", flush=True)
            options = f"--workload {args.workload} --steps {args.steps}"
            if args.member_change_p is not None:
                options += f" --member-change-p {args.member_change_p}"
            options += f" --profile {args.profile}" if args.profile else ""
            options += " --in-order" if args.in_order else ""
            print(f"replay: python -m stress_tests.raft_sim --seed {seed} {options}")
    took_s = time.monotonic() - started_s
    print(f"{len(list(seeds))} seeds, {len(failed)} failed {failed} in {took_s:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
