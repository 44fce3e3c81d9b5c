"""Which replica's broker to try first, and how many partitions a request routes over.
Pure: leaders, liveness and topics come in as arguments.

Which partitions a pop visits is ``protocol.routing.pop_order`` (one copy, shared with the
client library's direct path), re-exported here for the manager's modules; how a produced
batch is cut is ``protocol.produce_plan``'s."""

from __future__ import annotations

from collections.abc import Collection

from manager.registry.topics import PartitionRecord, TopicRecord
from protocol.errors import ErrorCode, RaftQError
from protocol.routing import pop_order
from protocol.types import BrokerId

__all__ = ["broker_order", "pop_order", "routing_count"]


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


def routing_count(topic: TopicRecord, requested: int | None) -> int:
    """The partition count to route over: the request's (fixed by its first attempt, so a
    retry reaches the same partitions) or else the topic's active count. Partitions are only
    ever added, so a smaller count is still valid; a larger one comes from a view this
    manager has not caught up with yet, and nothing is done."""
    if requested is None:
        return topic.active_count
    if requested > topic.active_count:
        raise RaftQError(
            ErrorCode.REFUSED,
            f"{topic.name!r} has {topic.active_count} active partitions here, the request "
            f"was routed for {requested}: retry",
        )
    return requested
