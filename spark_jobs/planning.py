"""Spark partitions from offset ranges. Pure: no Spark, no I/O.

One Spark partition per queue partition with something to read; ``minPartitions`` splits the
larger ranges further, in proportion to their size, as Spark's Kafka source does.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from spark_jobs.offsets import LOG_START_OFFSET, TopicOffsets


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def offset_ranges(start: TopicOffsets, end: TopicOffsets) -> list[OffsetRange]:
    """A range per partition of ``end`` (a partition ``start`` lacks is new: from the log
    start). Raises ``ValueError`` if some end lies before its start."""
    ranges = []
    for topic, partitions in sorted(end.items()):
        for partition, stop in sorted(partitions.items()):
            begin = start.get(topic, {}).get(partition, LOG_START_OFFSET)
            if stop < begin:
                raise ValueError(
                    f"{topic}/{partition}: ending offset {stop} is before starting offset {begin}"
                )
            ranges.append(OffsetRange(topic, partition, begin, stop))
    return ranges


def plan(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Drop empty ranges; split to reach about ``min_partitions`` tasks if that is more."""
    useful = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in useful)
    if min_partitions is None or min_partitions <= len(useful) or total == 0:
        return useful
    planned: list[OffsetRange] = []
    for r in useful:
        parts = min(r.size, max(1, round(r.size * min_partitions / total)))
        planned.extend(split(r, parts))
    return planned


def split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces whose sizes differ by at most one."""
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition_id, a, b) for a, b in pairwise(bounds)]
