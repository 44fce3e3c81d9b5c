"""``MessageStore``: the broker's database as the rest of the broker sees it.

``sql_store.SqlMessageStore`` implements it on SQLite or PostgreSQL; ``MemoryMessageStore``
here is its in-memory twin for tests.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from protocol.types import Offset, ReplicaSpec, StoredMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushRow:
    """A ``StoredMessage`` on its way into the database, with the seed's
    ``msg_replicated_bitmask``; keyword-only like every message shape (see ``NewMessage``)."""

    offset: int
    key: str | None
    value: str
    timestamp_ms: int
    replicated_bitmask: int


@dataclass(frozen=True, slots=True)
class RangeChecksum:
    start: int
    end: int
    count: int
    sha256: str


class MessageStore(Protocol):
    def insert_messages(
        self, topic: str, partition_id: int, rows: list[FlushRow], flushed_offset: int
    ) -> None:
        """Insert rows (skipping ones already there) and record ``flushed_offset``, in one
        transaction."""

    def read_messages(
        self, topic: str, partition_id: int, start: int, end: int
    ) -> list[StoredMessage]: ...

    def checksum(self, topic: str, partition_id: int, start: int, end: int) -> RangeChecksum: ...

    def save_replica(self, spec: ReplicaSpec) -> None: ...

    def load_replicas(self) -> list[ReplicaSpec]: ...

    def close(self) -> None: ...


def range_checksum(start: int, end: int, messages: Iterable[StoredMessage]) -> RangeChecksum:
    digest = hashlib.sha256()
    count = 0
    for message in messages:
        key = "\x01" if message.key is None else "\x02" + message.key
        digest.update(f"{message.offset}\x00{key}\x00{message.timestamp_ms}\x00".encode())
        digest.update(message.value.encode("utf-8"))
        digest.update(b"\n")
        count += 1
    return RangeChecksum(start, end, count, digest.hexdigest())


class MemoryMessageStore:
    """In-memory twin of ``SqlMessageStore`` with the same idempotence, for tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[tuple[str, int], dict[int, StoredMessage]] = {}
        self._replicas: dict[tuple[str, int], ReplicaSpec] = {}
        self.flushed_offsets: dict[tuple[str, int], int] = {}

    def insert_messages(
        self, topic: str, partition_id: int, rows: list[FlushRow], flushed_offset: int
    ) -> None:
        with self._lock:
            stored = self._messages.setdefault((topic, partition_id), {})
            for row in rows:
                stored.setdefault(
                    row.offset,
                    StoredMessage(
                        offset=Offset(row.offset),
                        value=row.value,
                        key=row.key,
                        timestamp_ms=row.timestamp_ms,
                    ),
                )
            self.flushed_offsets[(topic, partition_id)] = flushed_offset

    def read_messages(
        self, topic: str, partition_id: int, start: int, end: int
    ) -> list[StoredMessage]:
        with self._lock:
            stored = self._messages.get((topic, partition_id), {})
            return [stored[o] for o in sorted(stored) if start <= o < end]

    def checksum(self, topic: str, partition_id: int, start: int, end: int) -> RangeChecksum:
        return range_checksum(start, end, self.read_messages(topic, partition_id, start, end))

    def save_replica(self, spec: ReplicaSpec) -> None:
        with self._lock:
            self._replicas.setdefault((spec.topic, spec.partition_id), spec)

    def load_replicas(self) -> list[ReplicaSpec]:
        with self._lock:
            return list(self._replicas.values())

    def close(self) -> None:
        pass
