"""The named fault plans and the two tiers that run them.

fast (CI, every submission, one cluster, a few minutes): no faults; repeated kill -9 of
partition leaders; pause of a leader; manager and load-balancer failover; whole-cluster
restart. long (about 15 minutes, ``python -m stress_tests.chaos --tier long``): the fast
plans plus network partitions and mixed chaos, over several seeds.
"""

from __future__ import annotations

from stress_tests.scheduler import FaultKind, FaultPlan

K = FaultKind

NO_FAULTS = FaultPlan("no-faults", (), warmup_s=8.0)
LEADER_KILLS = FaultPlan("leader-kills", ((K.KILL_PARTITION_LEADER, 3),))
LEADER_PAUSE = FaultPlan(
    "leader-pause",
    ((K.PAUSE_PARTITION_LEADER, 2),),
    hold_s_min=4.0,
    hold_s_max=5.0,
)
"""Paused longer than the leader fallback timeout (3 s), so a new leader is elected while
the old one is frozen and must step down when it wakes."""
MANAGER_LB_FAILOVER = FaultPlan(
    "manager-lb-failover",
    ((K.KILL_MANAGER_LEADER, 2), (K.PAUSE_MANAGER_LEADER, 1), (K.KILL_LOAD_BALANCER, 1)),
    hold_s_min=3.5,
    hold_s_max=4.5,
)
CLUSTER_RESTART = FaultPlan("cluster-restart", ((K.KILL_CLUSTER, 1),), warmup_s=6.0)
PARTITIONS = FaultPlan(
    "network-partitions",
    ((K.ISOLATE_PARTITION_LEADER, 3), (K.ISOLATE_MANAGER_LEADER, 1)),
    hold_s_min=5.0,
    hold_s_max=7.0,
)
"""Held past the leader fallback timeout, so the isolated leader steps down."""
MIXED_CHAOS = FaultPlan(
    "mixed-chaos",
    (
        (K.KILL_PARTITION_LEADER, 2),
        (K.PAUSE_PARTITION_LEADER, 1),
        (K.KILL_NODE, 2),
        (K.KILL_MANAGER_LEADER, 1),
        (K.PAUSE_MANAGER_LEADER, 1),
        (K.ISOLATE_PARTITION_LEADER, 2),
        (K.KILL_CLUSTER, 1),
    ),
    shuffle=True,
    gap_s_min=1.0,
    gap_s_max=3.0,
    hold_s_min=2.0,
    hold_s_max=5.0,
)

FAST_TIER = (NO_FAULTS, LEADER_KILLS, LEADER_PAUSE, MANAGER_LB_FAILOVER, CLUSTER_RESTART)
LONG_TIER_PLANS = (*FAST_TIER, PARTITIONS, MIXED_CHAOS)
LONG_TIER_SEEDS = (1, 2)
LONG_TIER_EXTRA_CHAOS_SEEDS = (3, 4)
"""Mixed chaos, the plan most likely to find something, gets more seeds."""
PLANS = {plan.name: plan for plan in LONG_TIER_PLANS}
