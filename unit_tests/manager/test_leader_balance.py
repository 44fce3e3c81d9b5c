"""``next_transfer``: one leadership transfer at a time narrows the gap until every alive
broker leads within one of every broker it could take a partition from."""

from __future__ import annotations

from manager.leader_balance import Placed, Transfer, next_transfer
from protocol.types import BrokerId, PartitionId

ALL = (BrokerId(1), BrokerId(2), BrokerId(3))


def _partitions(leaders: list[int]) -> list[Placed]:
    """One partition per entry, led by that broker, with a replica on every broker."""
    return [
        Placed("t", PartitionId(i), BrokerId(leader), {b: f"h:{100 * b + i}" for b in ALL})
        for i, leader in enumerate(leaders)
    ]


def _apply(partitions: list[Placed], transfer: Transfer) -> list[Placed]:
    return [
        Placed(p.topic, p.partition_id, transfer.to_broker, p.replicas)
        if (p.topic, p.partition_id) == (transfer.topic, transfer.partition_id)
        else p
        for p in partitions
    ]


def test_a_restarted_broker_gets_its_share_back_one_transfer_at_a_time() -> None:
    partitions = _partitions([2, 2, 2, 3, 3, 3])  # broker 1 came back and leads nothing
    transfers = []
    while (transfer := next_transfer(partitions, ALL)) is not None:
        assert transfer.from_broker != transfer.to_broker
        assert transfer.to_raft_address == f"h:{100 * transfer.to_broker + transfer.partition_id}"
        transfers.append(transfer)
        partitions = _apply(partitions, transfer)
        assert len(transfers) <= 6, "converges"
    counts = [sum(p.leader == b for p in partitions) for b in ALL]
    assert counts == [2, 2, 2] and len(transfers) == 2


def test_balanced_dead_and_unknown_leaders_ask_for_nothing() -> None:
    assert next_transfer(_partitions([1, 2, 3, 1, 2]), ALL) is None  # within one
    # Broker 3 is dead: it neither gives nor takes; 1 and 2 are within one of each other.
    assert next_transfer(_partitions([1, 1, 2, 3, 3, 3]), ALL[:2]) is None
    unknown = [Placed("t", PartitionId(0), None, {b: "h:1" for b in ALL})]
    assert next_transfer(unknown + _partitions([1, 1]), ALL) is not None  # 2 vs 0
    assert next_transfer(unknown, ALL) is None


def test_only_a_broker_holding_a_replica_can_take_the_lead() -> None:
    replicas = {BrokerId(1): "h:1", BrokerId(2): "h:2"}
    partitions = [Placed("t", PartitionId(i), BrokerId(1), replicas) for i in range(4)]
    transfer = next_transfer(partitions, ALL)  # broker 3 leads 0 but holds no replica
    assert transfer is not None and transfer.to_broker == 2
