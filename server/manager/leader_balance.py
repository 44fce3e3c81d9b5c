"""Leader balance: which partition should hand its leadership to which replica. Pure.

Raft elects whichever replica times out first, so after a broker restarts it leads nothing
and the others lead its share (with it the produce and pop traffic). The manager leader
asks for one transfer at a time, every ``leader_balance_period_s``: from a broker that leads
at least two more partitions than another alive broker holding a replica of one of them, to
that broker's replica. Each transfer narrows the gap by two, so the counts converge to
within one of each other; a transfer Raft refuses (its target lacks entries) is simply
chosen again later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from protocol.types import BrokerId, PartitionId


@dataclass(frozen=True, slots=True)
class Placed:
    """One active partition: who leads it now and where its replicas are."""

    topic: str
    partition_id: PartitionId
    leader: BrokerId | None
    replicas: Mapping[BrokerId, str]
    """Broker id -> that replica's Raft address."""


@dataclass(frozen=True, slots=True)
class Transfer:
    topic: str
    partition_id: PartitionId
    from_broker: BrokerId
    to_broker: BrokerId
    to_raft_address: str


def next_transfer(partitions: Iterable[Placed], alive: Iterable[BrokerId]) -> Transfer | None:
    """The transfer that best narrows the gap, or ``None`` when every alive broker leads
    within one of every other it could take a partition from. Deterministic."""
    alive_set = set(alive)
    placed = [p for p in partitions if p.leader in alive_set]
    leads = dict.fromkeys(alive_set, 0)
    for partition in placed:
        assert partition.leader is not None
        leads[partition.leader] += 1
    best: tuple[int, str, int, BrokerId, Transfer] | None = None
    for partition in placed:
        assert partition.leader is not None
        for broker, address in partition.replicas.items():
            if broker not in alive_set or broker == partition.leader:
                continue
            gap = leads[partition.leader] - leads[broker]
            if gap < 2:
                continue
            transfer = Transfer(
                partition.topic, partition.partition_id, partition.leader, broker, address
            )
            key = (-gap, partition.topic, partition.partition_id, broker, transfer)
            if best is None or key[:4] < best[:4]:
                best = key
    return None if best is None else best[4]
