"""Where messages go: key to partition, the partition groups of a produced batch, and the
order in which a pop visits partitions. Pure, and shared by the manager (the load balancer's
path) and the client library (its direct path to the brokers), so that a request retried on
the other path lands in the same partitions and gets the de-duplicated answer.

Python's ``hash()`` of a string changes per process (PYTHONHASHSEED), so it must never pick
a partition. CRC-32 of the UTF-8 key is stable, fast and spreads well enough for routing.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from protocol.types import NewMessage, PartitionId


def partition_for_key(key: str, partition_count: int) -> PartitionId:
    if partition_count <= 0:
        raise ValueError("partition_count must be positive")
    return PartitionId(zlib.crc32(key.encode("utf-8")) % partition_count)


def partition_for_unkeyed(salt: str, partition_count: int) -> PartitionId:
    """A partition for messages without a key, fixed by ``salt`` (producer id and sequence)
    so that a retried batch lands where the original did."""
    return partition_for_key("\x00unkeyed\x00" + salt, partition_count)


def unkeyed_salt(producer_id: str, sequence: int) -> str:
    """The salt of a batch's unkeyed messages: the same on both paths."""
    return f"{producer_id}:{sequence}"


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
