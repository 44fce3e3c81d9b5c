"""``RecordAccumulator``: the asynchronous producer's records, batched per partition. Pure.

No threads, clock, network or randomness: the caller passes the time in (``now_s``) and
holds a lock around every call (``AsyncProducer`` does, from the threads that ``send`` and
from its sender thread). Tested in-process step by step (``unit_tests/raftq/
test_record_accumulator.py``).

- A record joins the queue of its partition, in ``append`` order. Order per partition is
  the order of ``append``, and so, with one batch in flight per partition, the order in
  which the partition stores them.
- ``ready`` takes, from each partition with fewer than ``in_flight_batches_max`` batches in
  flight, the longest prefix of its queue within ``batch_messages_max`` and
  ``batch_bytes_max`` (at least one record: an oversized one goes alone and the service
  answers 413) when it is full, or its first record has waited ``linger_s``, or the caller
  is flushing. The batch is then in flight until ``done``.
- Memory: the bytes of every record queued or in flight count against
  ``buffer_bytes_max`` until ``done`` releases them; ``has_room`` says whether one more fits.
- Unkeyed records stick to one partition until a batch is taken from it (Kafka's sticky
  partitioner): they form full batches instead of one small batch per partition.
- Flush marks: ``begin_flush`` returns a mark, ``flushed(mark)`` holds once every record
  appended before it is done (records appended meanwhile by other threads do not hold a
  flush back); while any flush waits, nothing lingers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from protocol.invariant import check
from protocol.types import NewMessage

T = TypeVar("T")
"""What the caller keeps with each record (the shell: its future)."""


class PendingRecord(NamedTuple, Generic[T]):
    """A record queued or in flight. A named tuple, not a frozen dataclass: one is built
    per ``send``, and a tuple is built in half the time."""

    message: NewMessage
    size_bytes: int
    appended_s: float
    token: T
    epoch: int
    """The flush epoch it was appended in (``begin_flush``)."""


@dataclass(frozen=True, slots=True)
class ReadyBatch(Generic[T]):
    """A batch taken for sending: its records in append order, all for one partition."""

    partition_id: int
    records: tuple[PendingRecord[T], ...]

    @property
    def size_bytes(self) -> int:
        return sum(r.size_bytes for r in self.records)


class RecordAccumulator(Generic[T]):
    def __init__(
        self,
        *,
        linger_s: float,
        batch_messages_max: int,
        batch_bytes_max: int,
        buffer_bytes_max: int,
        in_flight_batches_max: int = 1,
    ) -> None:
        if linger_s < 0:
            raise ValueError("linger_s must not be negative")
        for name, value in (
            ("batch_messages_max", batch_messages_max),
            ("batch_bytes_max", batch_bytes_max),
            ("buffer_bytes_max", buffer_bytes_max),
            ("in_flight_batches_max", in_flight_batches_max),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1")
        if batch_bytes_max > buffer_bytes_max:
            raise ValueError("batch_bytes_max must not exceed buffer_bytes_max")
        self.linger_s = linger_s
        self.batch_messages_max = batch_messages_max
        self.batch_bytes_max = batch_bytes_max
        self.buffer_bytes_max = buffer_bytes_max
        self.in_flight_batches_max = in_flight_batches_max
        self._queues: dict[int, deque[PendingRecord[T]]] = {}
        self._queued_bytes: dict[int, int] = {}
        self._in_flight: dict[int, int] = {}
        self.buffered_bytes = 0
        """Bytes of every record queued or in flight: at most ``buffer_bytes_max``."""
        self.buffered_records = 0
        self._sticky = 0
        self._epoch = 0
        self._outstanding: dict[int, int] = {}
        """Records queued or in flight per flush epoch (no entry at zero)."""
        self._flushes_waiting = 0
        self._sticky_given: int | None = None
        """The partition ``unkeyed_partition`` last gave, until a batch is taken from it."""

    def has_room(self, size_bytes: int) -> bool:
        """Whether a record of ``size_bytes`` fits now. One bigger than the whole buffer
        never fits (the caller refuses it at once rather than wait for nothing)."""
        return self.buffered_bytes + size_bytes <= self.buffer_bytes_max

    def unkeyed_partition(self, partition_count: int) -> int:
        """The partition an unkeyed record joins now (sticky until a batch leaves it)."""
        if partition_count < 1:
            raise ValueError("partition_count must be at least 1")
        self._sticky_given = self._sticky % partition_count
        return self._sticky_given

    def append(
        self, partition_id: int, message: NewMessage, size_bytes: int, now_s: float, token: T
    ) -> bool:
        """Queue a record; ``True`` when the sender should look again now (the partition's
        first record starts a linger, or its queue became a full batch)."""
        check(self.has_room(size_bytes), "append only what has_room admits")
        record = PendingRecord(message, size_bytes, now_s, token, self._epoch)
        queue = self._queues.setdefault(partition_id, deque())
        queue.append(record)
        queued_bytes = self._queued_bytes.get(partition_id, 0) + size_bytes
        self._queued_bytes[partition_id] = queued_bytes
        self.buffered_bytes += size_bytes
        self.buffered_records += 1
        self._outstanding[self._epoch] = self._outstanding.get(self._epoch, 0) + 1
        return (
            len(queue) == 1
            or len(queue) == self.batch_messages_max
            or queued_bytes - size_bytes < self.batch_bytes_max <= queued_bytes
        )

    def begin_flush(self) -> int:
        """A flush starts: every queue is sent at once (no linger) until ``end_flush``.
        Returns its mark: ``flushed(mark)`` once every record appended before is done."""
        mark = self._epoch
        self._epoch += 1
        self._flushes_waiting += 1
        return mark

    def end_flush(self) -> None:
        check(self._flushes_waiting > 0, "end_flush only after begin_flush")
        self._flushes_waiting -= 1

    def flushed(self, mark: int) -> bool:
        return all(epoch > mark for epoch in self._outstanding)

    def ready(self, now_s: float, closing: bool = False) -> list[ReadyBatch[T]]:
        """The batches to send now (each then in flight until ``done``), by partition id.
        While a flush waits, or ``closing``, nothing lingers."""
        flushing = closing or self._flushes_waiting > 0
        taken: list[ReadyBatch[T]] = []
        for partition_id in sorted(self._queues):
            queue = self._queues[partition_id]
            while (
                queue
                and self._in_flight.get(partition_id, 0) < self.in_flight_batches_max
                and (flushing or self._is_due(partition_id, queue, now_s))
            ):
                taken.append(self._take(partition_id, queue))
        for partition_id in [p for p, q in self._queues.items() if not q]:
            # Bounded: only partitions with queued records are kept.
            del self._queues[partition_id]
            del self._queued_bytes[partition_id]
        return taken

    def done(self, batch: ReadyBatch[T]) -> None:
        """The batch left for good (acknowledged or failed): its partition may send the next
        and its bytes are free."""
        in_flight = self._in_flight.get(batch.partition_id, 0)
        check(in_flight > 0, "done only for a batch in flight")
        if in_flight == 1:
            del self._in_flight[batch.partition_id]
        else:
            self._in_flight[batch.partition_id] = in_flight - 1
        self.buffered_bytes -= batch.size_bytes
        self.buffered_records -= len(batch.records)
        for record in batch.records:
            left = self._outstanding[record.epoch] - 1
            if left:
                self._outstanding[record.epoch] = left
            else:
                del self._outstanding[record.epoch]
        check(self.buffered_bytes >= 0, "buffered_bytes never goes below zero")

    def drain(self) -> list[PendingRecord[T]]:
        """Every queued record (not those in flight), removed: for a shell that gives up
        (its sender died). The buffer's bytes stay counted: nothing is appended after."""
        records = [r for queue in self._queues.values() for r in queue]
        self._queues.clear()
        self._queued_bytes.clear()
        return records

    def next_due_s(self) -> float | None:
        """When the earliest linger ends among partitions free to send (``None``: none is
        waiting on its linger). A full queue is due at once: ``ready`` takes it."""
        if self._flushes_waiting:
            due_now = [q[0].appended_s for p, q in self._queues.items() if q and self._free(p)]
            return min(due_now) if due_now else None
        due = [
            queue[0].appended_s + self.linger_s
            for partition_id, queue in self._queues.items()
            if queue and self._in_flight.get(partition_id, 0) < self.in_flight_batches_max
        ]
        return min(due) if due else None

    def _free(self, partition_id: int) -> bool:
        return self._in_flight.get(partition_id, 0) < self.in_flight_batches_max

    @property
    def in_flight_batches(self) -> int:
        return sum(self._in_flight.values())

    @property
    def is_empty(self) -> bool:
        """Nothing queued and nothing in flight: a flush is complete."""
        return self.buffered_records == 0

    def _is_due(self, partition_id: int, queue: deque[PendingRecord[T]], now_s: float) -> bool:
        full = (
            len(queue) >= self.batch_messages_max
            or self._queued_bytes[partition_id] >= self.batch_bytes_max
        )
        return full or now_s >= queue[0].appended_s + self.linger_s

    def _take(self, partition_id: int, queue: deque[PendingRecord[T]]) -> ReadyBatch[T]:
        records: list[PendingRecord[T]] = []
        size = 0
        while queue and len(records) < self.batch_messages_max:
            if records and size + queue[0].size_bytes > self.batch_bytes_max:
                break
            record = queue.popleft()
            records.append(record)
            size += record.size_bytes
        self._queued_bytes[partition_id] -= size
        self._in_flight[partition_id] = self._in_flight.get(partition_id, 0) + 1
        if partition_id == self._sticky_given:
            self._sticky += 1  # the next unkeyed records start a batch on the next partition
            self._sticky_given = None
        return ReadyBatch(partition_id, tuple(records))
