"""Seeded, replayable fault schedules. Pure: ``schedule(plan, seed)`` is a function of its
arguments only (its own ``random.Random``), so a run's seed reproduces its faults exactly;
the run prints and saves the schedule.

Targets named by role ("the leader of partition 1", "the manager leader") are resolved when
the fault fires, since who leads depends on the run; random nodes are drawn here, from the
seed.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

NODE_NAMES = ("lb", "manager-1", "manager-2", "manager-3", "broker-1", "broker-2", "broker-3")


class FaultKind(enum.Enum):
    KILL_PARTITION_LEADER = "kill-partition-leader"
    KILL_MANAGER_LEADER = "kill-manager-leader"
    KILL_LOAD_BALANCER = "kill-load-balancer"
    KILL_NODE = "kill-node"
    """kill -9 and restart of a node drawn from the seed (any role)."""
    PAUSE_PARTITION_LEADER = "pause-partition-leader"
    PAUSE_MANAGER_LEADER = "pause-manager-leader"
    KILL_CLUSTER = "kill-cluster"
    """kill -9 of every node at once, then a restart of all."""
    ISOLATE_PARTITION_LEADER = "isolate-partition-leader"
    """Cut the leader's Raft traffic to and from its followers; clients still reach it."""
    ISOLATE_MANAGER_LEADER = "isolate-manager-leader"


NEEDS_NETWORK = frozenset({FaultKind.ISOLATE_PARTITION_LEADER, FaultKind.ISOLATE_MANAGER_LEADER})


@dataclass(frozen=True, slots=True)
class FaultPlan:
    name: str
    faults: tuple[tuple[FaultKind, int], ...]
    """Each kind with how many times it fires."""
    shuffle: bool = False
    """Mixed chaos: fire the faults in a seeded random order instead of as listed."""
    warmup_s: float = 4.0
    """Load before the first fault."""
    gap_s_min: float = 3.0
    gap_s_max: float = 5.0
    """Pause after one fault heals before the next fires."""
    hold_s_min: float = 2.0
    hold_s_max: float = 4.0
    """How long a node stays down, paused or cut off (pauses: longer than an election)."""
    partition_count: int = 3

    @property
    def planned(self) -> int:
        return sum(n for _, n in self.faults)


@dataclass(frozen=True, slots=True)
class FaultStep:
    index: int
    kind: FaultKind
    gap_s: float
    """Wait after the previous step finished (or after the warmup) before this one."""
    hold_s: float
    partition_id: int
    """Partition whose leader a partition-leader fault targets (also the one probed)."""
    node: str | None = None
    """For KILL_NODE: the node drawn from the seed."""

    def describe(self) -> str:
        target = self.node if self.node is not None else f"partition {self.partition_id}"
        return (
            f"#{self.index} {self.kind.value} ({target}) after {self.gap_s:.2f} s, "
            f"hold {self.hold_s:.2f} s"
        )


def schedule(plan: FaultPlan, seed: int) -> tuple[FaultStep, ...]:
    rng = random.Random(f"{plan.name}/{seed}")
    kinds = [kind for kind, count in plan.faults for _ in range(count)]
    if plan.shuffle:
        rng.shuffle(kinds)
    steps = []
    for index, kind in enumerate(kinds):
        gap_s = plan.warmup_s if index == 0 else rng.uniform(plan.gap_s_min, plan.gap_s_max)
        steps.append(
            FaultStep(
                index=index,
                kind=kind,
                gap_s=round(gap_s, 3),
                hold_s=round(rng.uniform(plan.hold_s_min, plan.hold_s_max), 3),
                partition_id=rng.randrange(plan.partition_count),
                node=rng.choice(NODE_NAMES) if kind is FaultKind.KILL_NODE else None,
            )
        )
    return tuple(steps)
