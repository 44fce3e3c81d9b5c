"""What changed in one file since it was last synced: the byte ranges written and the
smallest length it was truncated to. Pure (no I/O, no locks): the file system keeps one per
inode under its own lock.

Why both: at a sync the durable copy becomes the live file by (1) cutting the copy to the
smallest truncated length (bytes past it were cut, then maybe refilled with zeros by a later
extension), (2) copying every written range from the live file, (3) setting the copy's length
to the live length (an extension past the last write reads as zeros). A byte neither written
nor cut since the last sync is already the same in both."""

from __future__ import annotations

from dataclasses import dataclass, field

RANGES_MAX = 1024
"""Written ranges kept per file before they are merged; if merging leaves more, they collapse
into one span from the first to the last byte (copied whole at the next sync: correct, only
slower). Bounds the memory of a file written at many places and never synced."""


@dataclass
class DirtyRegion:
    """Half-open byte ranges ``[start, end)`` written since the last sync, and the smallest
    length set by a truncate since then (None: not truncated)."""

    ranges: list[tuple[int, int]] = field(default_factory=list)
    truncated_to: int | None = None

    def add_write(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0:
            raise ValueError(f"a write needs offset >= 0 and length >= 0: {offset}, {length}")
        if length == 0:
            return
        self.ranges.append((offset, offset + length))
        if len(self.ranges) > RANGES_MAX:
            self.ranges = _merged(self.ranges)
        if len(self.ranges) > RANGES_MAX:
            self.ranges = [(self.ranges[0][0], max(end for _, end in self.ranges))]

    def add_truncate(self, length: int) -> None:
        if length < 0:
            raise ValueError(f"a truncate needs length >= 0: {length}")
        if self.truncated_to is None or length < self.truncated_to:
            self.truncated_to = length

    def add(self, other: DirtyRegion) -> None:
        """Adds another region's changes (a sync that failed gives its region back)."""
        for start, end in other.ranges:
            self.add_write(start, end - start)
        if other.truncated_to is not None:
            self.add_truncate(other.truncated_to)

    def is_clean(self) -> bool:
        return not self.ranges and self.truncated_to is None

    def merged_ranges(self) -> list[tuple[int, int]]:
        """The written ranges sorted, overlapping and touching ones joined."""
        return _merged(self.ranges)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if result and start <= result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result
