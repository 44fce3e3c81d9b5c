"""The test clusters' port blocks never overlap, each other or anything else running."""

from __future__ import annotations

from itertools import combinations

from stress_tests.benchmark import BASE_PORT as BENCHMARK_BASE_PORT
from stress_tests.chaos import POWER_LOSS_PORT_OFFSET
from stress_tests.session import DEFAULT_BASE_PORT as TIER_BASE_PORT
from unit_tests.ports import CLUSTER_BASE_PORTS, CLUSTER_PORT_SPAN, port_block

SYSTEM_PORTS = (4222, 5432, 5672, 6379, 3306, 15672, 25672, 4369)
EPHEMERAL_FIRST = 32768


def test_cluster_port_blocks_are_disjoint_and_clear() -> None:
    blocks = {name: port_block(name) for name in CLUSTER_BASE_PORTS}
    for (a, first), (b, second) in combinations(blocks.items(), 2):
        assert not set(first) & set(second), f"{a} and {b} overlap"
    for name, block in blocks.items():
        assert block.stop <= EPHEMERAL_FIRST, name
        assert not set(SYSTEM_PORTS) & set(block), name


def test_the_fault_tiers_default_blocks_miss_the_test_blocks() -> None:
    tier = range(TIER_BASE_PORT, TIER_BASE_PORT + CLUSTER_PORT_SPAN)
    power_base = TIER_BASE_PORT + POWER_LOSS_PORT_OFFSET
    power = range(power_base, power_base + CLUSTER_PORT_SPAN)
    for name in CLUSTER_BASE_PORTS:
        block = set(port_block(name))
        assert not block & set(tier) and not block & set(power), name
    assert power.stop <= EPHEMERAL_FIRST


def test_the_benchmarks_default_block_misses_the_test_blocks() -> None:
    """The benchmark may run beside the tests (pop_replays sat on 22100-22199 until
    2026-11-28)."""
    benchmark = set(range(BENCHMARK_BASE_PORT, BENCHMARK_BASE_PORT + CLUSTER_PORT_SPAN))
    assert [n for n in CLUSTER_BASE_PORTS if benchmark & set(port_block(n))] == []
