"""Which replica's broker to try first. Pure: leaders and liveness come in as arguments.

Which partition each produced message goes to and which partitions a pop visits are in
``protocol.routing`` (one copy, shared with the client library's direct path); they are
re-exported here for the manager's modules."""

from __future__ import annotations

from collections.abc import Collection

from manager.registry.topics import PartitionRecord
from protocol.routing import PartitionGroup, group_messages, pop_order
from protocol.types import BrokerId

__all__ = ["PartitionGroup", "broker_order", "group_messages", "pop_order"]


def broker_order(
    partition: PartitionRecord,
    leader: BrokerId | None,
    alive: Collection[BrokerId],
    silent: Collection[BrokerId] = (),
) -> list[BrokerId]:
    """The partition leader's broker first (when known), then the other alive replicas' brokers
    in replica order; brokers silent at the last poll (a paused broker accepts connections but
    answers only after the HTTP timeout) come last. If none is known alive, every replica is
    tried: liveness may be stale."""
    replicas = [r.broker_id for r in partition.replicas]
    ordered = [b for b in replicas if b in alive and b != leader]
    if leader is not None and leader in replicas:
        ordered.insert(0, leader)
    ordered = ordered or replicas
    return [b for b in ordered if b not in silent] + [b for b in ordered if b in silent]
