"""Broker order (the manager's); message and pop routing are tested in unit_tests/protocol."""

from __future__ import annotations

from manager import log_routing
from manager.log_routing import broker_order
from manager.registry.topics import PartitionRecord, PartitionState, ReplicaPlacement
from protocol import routing
from protocol.types import BrokerId, PartitionId, ReplicaId


def test_the_manager_uses_the_one_copy_in_protocol() -> None:
    assert log_routing.pop_order is routing.pop_order


def _partition(*brokers: int) -> PartitionRecord:
    replicas = tuple(
        ReplicaPlacement(ReplicaId(i), BrokerId(b), f"h:{b}") for i, b in enumerate(brokers)
    )
    return PartitionRecord(PartitionId(0), replicas, PartitionState.ACTIVE, 1)


def test_broker_order_leader_first_then_alive() -> None:
    partition = _partition(1, 2, 3)
    alive = {BrokerId(1), BrokerId(3)}
    assert broker_order(partition, BrokerId(3), alive) == [3, 1]
    assert broker_order(partition, None, alive) == [1, 3]
    assert broker_order(partition, None, set()) == [1, 2, 3]
    assert broker_order(partition, BrokerId(9), alive) == [1, 3]


def test_brokers_silent_at_the_last_poll_are_tried_last() -> None:
    partition = _partition(1, 2, 3)
    alive = {BrokerId(1), BrokerId(2), BrokerId(3)}
    assert broker_order(partition, None, alive, {BrokerId(1)}) == [2, 3, 1]
    assert broker_order(partition, BrokerId(2), alive, {BrokerId(2), BrokerId(3)}) == [1, 2, 3]
