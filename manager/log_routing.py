"""Which partition each produced message goes to, which partitions a pop visits, and which
replica's broker to try first. Pure: counters and leaders come in as arguments."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from manager.registry.topics import PartitionRecord
from protocol.routing import partition_for_key, partition_for_unkeyed
from protocol.types import BrokerId, NewMessage, PartitionId


@dataclass(frozen=True, slots=True)
class PartitionGroup:
    partition_id: PartitionId
    indexes: tuple[int, ...]
    """Positions of this group's messages in the request, in request order."""


def group_messages(
    messages: Sequence[NewMessage],
    partition_count: int,
    *,
    partition_id: PartitionId | None,
    unkeyed_salt: str | None,
    round_robin: int,
) -> list[PartitionGroup]:
    """Groups ordered by their first message. Keyed messages follow their key; all unkeyed
    ones go to one partition, fixed by ``unkeyed_salt`` (producer id and sequence, so a retry
    lands where the original did) or else by the ``round_robin`` counter."""
    if partition_id is not None:
        return [PartitionGroup(partition_id, tuple(range(len(messages))))]
    if unkeyed_salt is not None:
        unkeyed = partition_for_unkeyed(unkeyed_salt, partition_count)
    else:
        unkeyed = PartitionId(round_robin % partition_count)
    indexes: dict[PartitionId, list[int]] = {}
    for index, message in enumerate(messages):
        target = unkeyed if message.key is None else partition_for_key(message.key, partition_count)
        indexes.setdefault(target, []).append(index)
    return [PartitionGroup(pid, tuple(found)) for pid, found in indexes.items()]


def pop_order(
    partition_ids: Sequence[PartitionId], consumer_id: str, request_id: str | None, round_robin: int
) -> list[PartitionId]:
    """The partitions a pop asks, in order. With a request id the start is a hash of it, so a
    retry visits the same partitions in the same order and gets the same ranges back."""
    count = len(partition_ids)
    if count == 0:
        return []
    start: int
    if request_id is not None:
        start = partition_for_key(f"{consumer_id}:{request_id}", count)
    else:
        start = round_robin % count
    return [partition_ids[(int(start) + i) % count] for i in range(count)]


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
