"""The fault schedule is a pure function of the plan and the seed."""

from __future__ import annotations

from stress_tests.scheduler import FaultKind, schedule
from stress_tests.tiers import FAST_TIER, LEADER_KILLS, MIXED_CHAOS, PLANS


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert schedule(MIXED_CHAOS, 7) == schedule(MIXED_CHAOS, 7)
    assert schedule(MIXED_CHAOS, 7) != schedule(MIXED_CHAOS, 8)


def test_every_planned_fault_is_scheduled_once() -> None:
    for plan in PLANS.values():
        steps = schedule(plan, 3)
        assert len(steps) == plan.planned
        for kind, count in plan.faults:
            assert sum(step.kind is kind for step in steps) == count


def test_steps_stay_within_the_plans_bounds() -> None:
    for step in schedule(MIXED_CHAOS, 11):
        assert MIXED_CHAOS.hold_s_min <= step.hold_s <= MIXED_CHAOS.hold_s_max
        assert 0 <= step.partition_id < MIXED_CHAOS.partition_count
        assert (step.node is not None) == (step.kind is FaultKind.KILL_NODE)
    assert schedule(LEADER_KILLS, 1)[0].gap_s == LEADER_KILLS.warmup_s


def test_the_fast_tier_covers_what_ci_must_run() -> None:
    kinds = {kind for plan in FAST_TIER for kind, _ in plan.faults}
    assert {
        FaultKind.KILL_PARTITION_LEADER,
        FaultKind.PAUSE_PARTITION_LEADER,
        FaultKind.KILL_MANAGER_LEADER,
        FaultKind.KILL_LOAD_BALANCER,
        FaultKind.KILL_CLUSTER,
    } <= kinds
    assert any(plan.planned == 0 for plan in FAST_TIER)
