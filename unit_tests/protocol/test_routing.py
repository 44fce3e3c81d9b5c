"""Routing of produce batches and pop order (shared by the manager and the client)."""

from __future__ import annotations

from protocol.routing import (
    group_messages,
    partition_for_key,
    partition_for_unkeyed,
    pop_order,
    unkeyed_salt,
)
from protocol.types import NewMessage, PartitionId


def test_given_partition_takes_everything_in_order() -> None:
    messages = [NewMessage(value="a", key="k1"), NewMessage(value="b")]
    groups = group_messages(
        messages, 4, partition_id=PartitionId(2), unkeyed_salt=None, round_robin=0
    )
    assert [(g.partition_id, g.indexes) for g in groups] == [(2, (0, 1))]


def test_keyed_by_crc_unkeyed_together_by_salt() -> None:
    messages = [
        NewMessage(value="a", key="k1"),
        NewMessage(value="b"),
        NewMessage(value="c", key="k2"),
        NewMessage(value="d"),
    ]
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
    messages = [NewMessage(value="a"), NewMessage(value="b")]
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


def test_unkeyed_salt_is_producer_and_sequence() -> None:
    assert unkeyed_salt("p", 7) == "p:7"
