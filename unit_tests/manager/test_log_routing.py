"""Routing of produce batches, pop order and broker order."""

from __future__ import annotations

from manager.log_routing import broker_order, group_messages, pop_order
from manager.registry.topics import PartitionRecord, PartitionState, ReplicaPlacement
from protocol.routing import partition_for_key, partition_for_unkeyed
from protocol.types import BrokerId, NewMessage, PartitionId, ReplicaId


def test_given_partition_takes_everything_in_order() -> None:
    messages = [NewMessage("a", "k1"), NewMessage("b")]
    groups = group_messages(
        messages, 4, partition_id=PartitionId(2), unkeyed_salt=None, round_robin=0
    )
    assert [(g.partition_id, g.indexes) for g in groups] == [(2, (0, 1))]


def test_keyed_by_crc_unkeyed_together_by_salt() -> None:
    messages = [NewMessage("a", "k1"), NewMessage("b"), NewMessage("c", "k2"), NewMessage("d")]
    groups = group_messages(messages, 8, partition_id=None, unkeyed_salt="p:7", round_robin=0)
    where = {i: g.partition_id for g in groups for i in g.indexes}
    assert where[0] == partition_for_key("k1", 8)
    assert where[2] == partition_for_key("k2", 8)
    assert where[1] == where[3] == partition_for_unkeyed("p:7", 8)
    for group in groups:
        assert list(group.indexes) == sorted(group.indexes)
    again = group_messages(messages, 8, partition_id=None, unkeyed_salt="p:7", round_robin=5)
    assert again == groups  # a retry with the same sequence lands in the same place


def test_unkeyed_without_sequence_round_robins() -> None:
    messages = [NewMessage("a"), NewMessage("b")]
    first = group_messages(messages, 3, partition_id=None, unkeyed_salt=None, round_robin=4)
    assert [(g.partition_id, g.indexes) for g in first] == [(1, (0, 1))]


def test_pop_order_is_deterministic_with_a_request_id() -> None:
    pids = [PartitionId(p) for p in range(5)]
    order = pop_order(pids, "c", "r1", round_robin=0)
    assert order == pop_order(pids, "c", "r1", round_robin=3)
    assert sorted(order) == pids
    assert order[0] == partition_for_key("c:r1", 5)
    assert pop_order(pids, "c", None, round_robin=7)[0] == 2
    assert pop_order([], "c", None, round_robin=0) == []


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
