"""The membership nemesis's schedules (issue 19): seeded and replayable, every operation
possible where it falls (a drain only with a spare broker, a manager removed only above
three), an impossible plan refused, and the port blocks of its clusters clear of the tests'."""

from __future__ import annotations

import pytest

from stress_tests.chaos import MEMBERSHIP_BASE_PORT, POWER_LOSS_PORT_OFFSET
from stress_tests.membership_plan import (
    BROKERS_MIN,
    BROKERS_START,
    MANAGERS_MIN,
    MANAGERS_START,
    MEMBERSHIP_LONG,
    MEMBERSHIP_SHORT,
    MEMBERSHIP_SHORT_ISOLATION,
    MembershipPlan,
    OpKind,
    PlanError,
    pick_of,
    schedule_ops,
)
from stress_tests.session import DEFAULT_BASE_PORT
from unit_tests.ports import CLUSTER_BASE_PORTS, CLUSTER_BROKER_COUNTS, port_block

PLANS = (MEMBERSHIP_SHORT, MEMBERSHIP_SHORT_ISOLATION, MEMBERSHIP_LONG)
EPHEMERAL_FIRST = 32768


@pytest.mark.parametrize("plan", PLANS, ids=[p.name for p in PLANS])
def test_a_seed_replays_its_schedule_and_runs_every_operation(plan: MembershipPlan) -> None:
    steps = schedule_ops(plan, 7)
    assert steps == schedule_ops(plan, 7)
    assert len(steps) == plan.planned
    counted = {kind: sum(1 for s in steps if s.kind is kind) for kind, _ in plan.ops}
    assert counted == dict(plan.ops)
    assert steps[0].gap_s == plan.warmup_s


@pytest.mark.parametrize("seed", range(40))
def test_every_operation_is_possible_where_it_falls(seed: int) -> None:
    brokers, managers, added = BROKERS_START, MANAGERS_START, 0
    for step in schedule_ops(MEMBERSHIP_LONG, seed):
        if step.kind is OpKind.DRAIN_REMOVE_BROKER:
            brokers -= 1
        if step.kind is OpKind.ADD_BROKER:
            brokers, added = brokers + 1, added + 1
        if step.kind is OpKind.REMOVE_MANAGER:
            managers -= 1
        if step.kind is OpKind.ADD_MANAGER:
            managers += 1
        assert brokers >= BROKERS_MIN and managers >= MANAGERS_MIN, step.describe()
    assert added <= MEMBERSHIP_LONG.broker_adds_max


def test_seeds_give_different_orders() -> None:
    orders = {tuple(s.kind for s in schedule_ops(MEMBERSHIP_LONG, seed)) for seed in range(5)}
    assert len(orders) > 1


def test_a_plan_with_more_drains_than_spare_brokers_is_refused() -> None:
    plan = MembershipPlan(
        "impossible", ((OpKind.DRAIN_REMOVE_BROKER, 2), (OpKind.ADD_BROKER, 1)), broker_adds_max=1
    )
    with pytest.raises(PlanError):
        schedule_ops(plan, 1)


def test_the_short_plan_probes_a_refused_drain() -> None:
    drains = [s for s in schedule_ops(MEMBERSHIP_SHORT, 3) if s.kind is OpKind.DRAIN_REMOVE_BROKER]
    assert drains and all(s.refusal_probe for s in drains)
    assert "refused drain" in drains[0].describe()


def test_pick_chooses_among_the_candidates_in_their_order() -> None:
    assert pick_of(7, [10, 20, 30]) == 20
    assert pick_of(7, []) is None


def test_the_membership_clusters_port_blocks_are_clear() -> None:
    ci = port_block("membership_nemesis")
    assert CLUSTER_BROKER_COUNTS["membership_nemesis"] >= MEMBERSHIP_SHORT_ISOLATION.broker_ids_max
    tier = range(
        MEMBERSHIP_BASE_PORT, MEMBERSHIP_BASE_PORT + 100 * MEMBERSHIP_LONG.broker_ids_max + 100
    )
    assert tier.stop <= EPHEMERAL_FIRST and ci.stop <= EPHEMERAL_FIRST
    others = [
        range(DEFAULT_BASE_PORT, DEFAULT_BASE_PORT + 400),
        range(
            DEFAULT_BASE_PORT + POWER_LOSS_PORT_OFFSET,
            DEFAULT_BASE_PORT + POWER_LOSS_PORT_OFFSET + 400,
        ),
        *(port_block(name) for name in CLUSTER_BASE_PORTS),
    ]
    for block in others:
        assert not set(block) & set(tier), block
