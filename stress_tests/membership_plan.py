"""The membership nemesis's plans and their seeded schedules (issue 19). Pure: ``schedule_ops
(plan, seed)`` is a function of its arguments only (its own ``random.Random``), so a seed
replays the same operations in the same order with the same gaps and holds.

An operation changes who holds what (a broker killed and replaced, drained and removed,
added; a manager added or removed; a partition added) or is one of the fault kinds of
``scheduler.py`` (pause, isolation, kills of leaders). The schedule keeps the cluster able
to carry out every operation, simulating the counts as it draws: a drain only while at
least ``BROKERS_MIN + 1`` brokers run (so every replica of a replication-factor-3 partition
has somewhere to go after the next kill too), at most ``broker_adds_max`` brokers added (the
port block of the cluster is sized for them), a manager removed only above
``MANAGERS_MIN``. Targets are drawn when the operation runs, from the step's ``pick`` (a
number fixed by the seed) over what the cluster then holds (``pick_of``).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from stress_tests.scheduler import FaultKind

T = TypeVar("T")

BROKERS_START = 4
"""Brokers a membership cluster starts with: one more than the widest replication factor,
so a dead broker's replicas have a live broker to move to."""
BROKERS_MIN = 4
"""Brokers never fewer (a drain needs one more): a kill then still has a spare broker."""
MANAGERS_START = 3
MANAGERS_MIN = 3
"""The managers refuse to go below three (``manager/cluster.py``)."""
MANAGERS_MAX = 9
"""``raftq manager add`` takes ports B+10+i and B+20+i, up to nine managers."""


class OpKind(enum.Enum):
    KILL_REPLACE_BROKER = "kill-replace-broker"
    """kill -9 a broker, wait until its replicas (replication factor 3) moved to live
    brokers, then restart it (it drops its stale replicas)."""
    DRAIN_REMOVE_BROKER = "drain-remove-broker"
    """Drain a broker whose drain is allowed, wait until it holds nothing, stop it, remove
    it (``DELETE /brokers``); first, when the step says so, try a drain that must be
    refused (the broker holding a replication-factor-1 replica: 409 CANNOT_MOVE)."""
    ADD_BROKER = "add-broker"
    ADD_MANAGER = "add-manager"
    REMOVE_MANAGER = "remove-manager"
    ADD_PARTITION = "add-partition"
    """``POST /partitions`` to the replication-factor-3 topic."""
    PAUSE_PARTITION_LEADER = "pause-partition-leader"
    ISOLATE_PARTITION_LEADER = "isolate-partition-leader"
    KILL_PARTITION_LEADER = "kill-partition-leader"
    KILL_MANAGER_LEADER = "kill-manager-leader"


FAULT_KINDS = {
    OpKind.PAUSE_PARTITION_LEADER: FaultKind.PAUSE_PARTITION_LEADER,
    OpKind.ISOLATE_PARTITION_LEADER: FaultKind.ISOLATE_PARTITION_LEADER,
    OpKind.KILL_PARTITION_LEADER: FaultKind.KILL_PARTITION_LEADER,
    OpKind.KILL_MANAGER_LEADER: FaultKind.KILL_MANAGER_LEADER,
}
"""The operations ``faults.FaultInjector`` carries out (on the replication-factor-3 topic)."""
NEEDS_NETWORK = frozenset({OpKind.ISOLATE_PARTITION_LEADER})


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic of a membership run, with its own workers, history and checker verdict."""

    suffix: str
    partitions: int
    replication_factor: int
    producers: int = 1
    consumers: int = 1
    min_insync_replicas: int | None = None
    """Produced to by ``AckRecordingProducer`` (each ack's ``replicas_synced`` recorded and
    checked) when set."""
    retention_bytes: int = 0
    min_acked: int = 100


TOPICS = (
    TopicSpec("rf3", 3, 3, producers=2, consumers=1, min_acked=1_000),
    TopicSpec("rf2", 2, 2),
    TopicSpec("rf1", 1, 1),
    TopicSpec("insync3", 1, 3, min_insync_replicas=3, min_acked=50),
    TopicSpec("retained", 2, 3, retention_bytes=20_000),
)
"""The replication-factor-3 topic (first) is the one faults target and partitions are
added to; ``retained`` keeps about 20 kB per partition, so retention moves its log start
many times in a run."""
PARTITIONS_ADDED_MAX = 4


@dataclass(frozen=True, slots=True)
class MembershipPlan:
    name: str
    ops: tuple[tuple[OpKind, int], ...]
    """Each kind with how many times it runs."""
    warmup_s: float = 5.0
    gap_s_min: float = 1.0
    gap_s_max: float = 3.0
    hold_s_min: float = 4.0
    hold_s_max: float = 6.0
    """Pauses and isolations: longer than the leader fallback (3 s)."""
    refusal_probe_share: float = 0.5
    """Share of drains preceded by a drain that must be refused."""
    broker_adds_max: int = 2

    @property
    def planned(self) -> int:
        return sum(n for _, n in self.ops)

    @property
    def broker_ids_max(self) -> int:
        """The highest broker id a run of the plan can reach (sizes its port block)."""
        return BROKERS_START + self.broker_adds_max


@dataclass(frozen=True, slots=True)
class OpStep:
    index: int
    kind: OpKind
    gap_s: float
    """Wait after the previous operation finished (or after the warmup) before this one."""
    hold_s: float
    pick: int
    """Chooses the target among the eligible ones when the step runs (``pick_of``)."""
    refusal_probe: bool = False
    """DRAIN_REMOVE_BROKER: first try to drain a broker whose drain must be refused."""

    def describe(self) -> str:
        probe = " (+ refused drain)" if self.refusal_probe else ""
        return (
            f"#{self.index} {self.kind.value}{probe} pick {self.pick} after {self.gap_s:.2f} s, "
            f"hold {self.hold_s:.2f} s"
        )


@dataclass(frozen=True, slots=True)
class Counts:
    """What the schedule simulates, to keep every operation possible."""

    brokers: int = BROKERS_START
    brokers_added: int = 0
    managers: int = MANAGERS_START
    managers_ever: int = MANAGERS_START
    partitions_added: int = 0

    def allows(self, kind: OpKind, plan: MembershipPlan) -> bool:
        if kind is OpKind.ADD_BROKER:
            return self.brokers_added < plan.broker_adds_max
        if kind is OpKind.DRAIN_REMOVE_BROKER:
            return self.brokers > BROKERS_MIN
        if kind is OpKind.ADD_MANAGER:
            return self.managers_ever < MANAGERS_MAX
        if kind is OpKind.REMOVE_MANAGER:
            return self.managers > MANAGERS_MIN
        if kind is OpKind.ADD_PARTITION:
            return self.partitions_added < PARTITIONS_ADDED_MAX
        return True

    def after(self, kind: OpKind) -> Counts:
        if kind is OpKind.ADD_BROKER:
            return replace(self, brokers=self.brokers + 1, brokers_added=self.brokers_added + 1)
        if kind is OpKind.DRAIN_REMOVE_BROKER:
            return replace(self, brokers=self.brokers - 1)
        if kind is OpKind.ADD_MANAGER:
            return replace(self, managers=self.managers + 1, managers_ever=self.managers_ever + 1)
        if kind is OpKind.REMOVE_MANAGER:
            return replace(self, managers=self.managers - 1)
        if kind is OpKind.ADD_PARTITION:
            return replace(self, partitions_added=self.partitions_added + 1)
        return self


class PlanError(ValueError):
    """The plan's operations cannot all run in any order (say, more drains than adds)."""


def schedule_ops(plan: MembershipPlan, seed: int) -> tuple[OpStep, ...]:
    """The plan's operations in a seeded order that keeps each one possible: at every step
    one kind is drawn among those left that the simulated cluster allows."""
    rng = random.Random(f"{plan.name}/{seed}")
    left = {kind: count for kind, count in plan.ops if count > 0}
    counts = Counts()
    steps = []
    for index in range(plan.planned):
        allowed = sorted((k for k in left if counts.allows(k, plan)), key=lambda k: k.value)
        if not allowed:
            raise PlanError(f"{plan.name}: no operation of {sorted(k.value for k in left)} fits")
        weights = [left[k] for k in allowed]
        kind = rng.choices(allowed, weights)[0]
        left[kind] -= 1
        if not left[kind]:
            del left[kind]
        counts = counts.after(kind)
        gap_s = plan.warmup_s if index == 0 else rng.uniform(plan.gap_s_min, plan.gap_s_max)
        steps.append(
            OpStep(
                index=index,
                kind=kind,
                gap_s=round(gap_s, 3),
                hold_s=round(rng.uniform(plan.hold_s_min, plan.hold_s_max), 3),
                pick=rng.randrange(1_000_000),
                refusal_probe=kind is OpKind.DRAIN_REMOVE_BROKER
                and rng.random() < plan.refusal_probe_share,
            )
        )
    return tuple(steps)


def pick_of(pick: int, candidates: Sequence[T]) -> T | None:
    """The step's choice among ``candidates`` (in the caller's stable order); None if none."""
    return candidates[pick % len(candidates)] if candidates else None


MEMBERSHIP_SHORT = MembershipPlan(
    "membership-short",
    (
        (OpKind.KILL_REPLACE_BROKER, 1),
        (OpKind.ADD_BROKER, 1),
        (OpKind.DRAIN_REMOVE_BROKER, 1),
        (OpKind.ADD_MANAGER, 1),
        (OpKind.REMOVE_MANAGER, 1),
        (OpKind.ADD_PARTITION, 1),
        (OpKind.PAUSE_PARTITION_LEADER, 1),
    ),
    warmup_s=4.0,
    broker_adds_max=1,
    refusal_probe_share=1.0,
)
"""CI: one of each membership operation and a pause, on one seed (about 3 minutes)."""
MEMBERSHIP_SHORT_ISOLATION = MembershipPlan(
    "membership-short-isolation",
    (*MEMBERSHIP_SHORT.ops, (OpKind.ISOLATE_PARTITION_LEADER, 1)),
    warmup_s=4.0,
    broker_adds_max=1,
    refusal_probe_share=1.0,
)
"""The CI plan where network partitions can be made (root, cgroup v2, iptables)."""
MEMBERSHIP_LONG = MembershipPlan(
    "membership-long",
    (
        (OpKind.KILL_REPLACE_BROKER, 3),
        (OpKind.ADD_BROKER, 2),
        (OpKind.DRAIN_REMOVE_BROKER, 2),
        (OpKind.ADD_MANAGER, 2),
        (OpKind.REMOVE_MANAGER, 2),
        (OpKind.ADD_PARTITION, 2),
        (OpKind.PAUSE_PARTITION_LEADER, 2),
        (OpKind.ISOLATE_PARTITION_LEADER, 2),
        (OpKind.KILL_PARTITION_LEADER, 2),
        (OpKind.KILL_MANAGER_LEADER, 1),
    ),
)
"""The long tier's: every operation several times, in a seeded order."""
MEMBERSHIP_LONG_SEEDS = (1, 2, 3)
