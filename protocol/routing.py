"""Key to partition routing with a hash that is stable across processes and versions.

Python's ``hash()`` of a string changes per process (PYTHONHASHSEED), so it must never pick
a partition. CRC-32 of the UTF-8 key is stable, fast and spreads well enough for routing.
"""

from __future__ import annotations

import zlib

from protocol.types import PartitionId


def partition_for_key(key: str, partition_count: int) -> PartitionId:
    if partition_count <= 0:
        raise ValueError("partition_count must be positive")
    return PartitionId(zlib.crc32(key.encode("utf-8")) % partition_count)


def partition_for_unkeyed(salt: str, partition_count: int) -> PartitionId:
    """A partition for messages without a key, fixed by ``salt`` (producer id and sequence)
    so that a retried batch lands where the original did."""
    return partition_for_key("\x00unkeyed\x00" + salt, partition_count)
