"""``MessageStore``: the broker's database as the rest of the broker sees it.

``sql_store.SqlMessageStore`` implements it on SQLite or PostgreSQL; ``MemoryMessageStore``
here is its in-memory twin for tests.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker.partition.log import MessageTuple
from protocol.invariant import check
from protocol.types import NO_HEADERS, Headers, Offset, ReplicaSpec, StoredMessage, headers_of


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushBatch:
    """Messages on their way into the database: ``messages`` as the partition's memory holds
    them, ``(offset, (key, value, timestamp_ms, headers))`` (key before value, like every
    message shape below the HTTP layer), and the seed's ``msg_replicated_bitmask`` of each. One
    object per batch, not one per message: it is built under the partition's lock."""

    messages: Sequence[tuple[int, MessageTuple]]
    bitmasks: Sequence[int]

    def __post_init__(self) -> None:
        check(len(self.messages) == len(self.bitmasks), "one bitmask per message")

    def __len__(self) -> int:
        return len(self.messages)

    @classmethod
    def of_stored(cls, messages: Sequence[StoredMessage]) -> FlushBatch:
        """Messages copied from a peer: no replica's flush state comes with them (mask 0)."""
        return cls(
            messages=[(m.offset, (m.key, m.value, m.timestamp_ms, m.headers)) for m in messages],
            bitmasks=[0] * len(messages),
        )

    def rows(self) -> Iterator[tuple[int, str | None, str, int, str | None, int]]:
        """``(offset, key, value, timestamp_ms, headers as text, bitmask)``, the table's
        column order."""
        for (offset, (key, value, timestamp_ms, headers)), mask in zip(
            self.messages, self.bitmasks, strict=True
        ):
            yield offset, key, value, timestamp_ms, headers_text(headers), mask


def headers_text(headers: Headers) -> str | None:
    """Headers as the database keeps them: a JSON object, NULL when there are none."""
    return json.dumps(dict(headers), ensure_ascii=False) if headers else None


def headers_from_text(text: str | None) -> Headers:
    return NO_HEADERS if text is None else headers_of(json.loads(text))


def stored_size(key: str | None, value: str, headers: str | None) -> int:
    """A row's size as retention by bytes counts it: characters of key, value and headers."""
    return len(value) + len(key or "") + len(headers or "")


@dataclass(frozen=True, slots=True)
class RangeChecksum:
    start: int
    end: int
    count: int
    sha256: str


class MessageStore(Protocol):
    def insert_messages(
        self, topic: str, partition_id: int, batch: FlushBatch, flushed_offset: int
    ) -> None:
        """Insert the batch (skipping rows already there) and record ``flushed_offset``, in
        one transaction."""

    def read_messages(
        self, topic: str, partition_id: int, start: int, end: int
    ) -> list[StoredMessage]: ...

    def checksum(self, topic: str, partition_id: int, start: int, end: int) -> RangeChecksum: ...

    def save_replica(self, spec: ReplicaSpec) -> None: ...

    def update_replica(self, spec: ReplicaSpec) -> None:
        """The replica's partition has other replicas now (re-replication): keep ``spec``'s
        for the next start; its own slot and address are unchanged."""

    def load_replicas(self) -> list[ReplicaSpec]: ...

    def retention_start(
        self, topic: str, partition_id: int, end: int, cutoff_ms: int | None, bytes_max: int | None
    ) -> int:
        """Retention over the stored rows below ``end``: the first offset to keep, so that
        no row kept is older than ``cutoff_ms`` (its timestamp) and the rows kept hold at
        most ``bytes_max`` (key, value and headers, in characters: ``stored_size``)."""

    def delete_below(self, topic: str, partition_id: int, offset: int) -> int:
        """Delete the rows below ``offset``; how many went."""

    def forget_replica(self, topic: str, partition_id: int) -> None:
        """Delete the replica's record and every row of its partition."""

    def close(self) -> None: ...


def range_checksum(start: int, end: int, messages: Iterable[StoredMessage]) -> RangeChecksum:
    digest = hashlib.sha256()
    count = 0
    for message in messages:
        key = "\x01" if message.key is None else "\x02" + message.key
        digest.update(f"{message.offset}\x00{key}\x00{message.timestamp_ms}\x00".encode())
        if message.headers:  # absent from the sum of a message without: sums stay as before
            digest.update(f"\x03{headers_text(message.headers)}\x00".encode())
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
        self, topic: str, partition_id: int, batch: FlushBatch, flushed_offset: int
    ) -> None:
        with self._lock:
            stored = self._messages.setdefault((topic, partition_id), {})
            for offset, key, value, timestamp_ms, headers, _ in batch.rows():
                stored.setdefault(
                    offset,
                    StoredMessage(
                        offset=Offset(offset),
                        key=key,
                        value=value,
                        timestamp_ms=timestamp_ms,
                        headers=headers_from_text(headers),
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

    def update_replica(self, spec: ReplicaSpec) -> None:
        with self._lock:
            self._replicas[(spec.topic, spec.partition_id)] = spec

    def load_replicas(self) -> list[ReplicaSpec]:
        with self._lock:
            return list(self._replicas.values())

    def retention_start(
        self, topic: str, partition_id: int, end: int, cutoff_ms: int | None, bytes_max: int | None
    ) -> int:
        with self._lock:
            stored = self._messages.get((topic, partition_id), {})
            rows = [stored[o] for o in sorted(stored) if o < end]
        start = rows[0].offset if rows else 0
        if cutoff_ms is not None:
            start = next((m.offset for m in rows if m.timestamp_ms >= cutoff_ms), end)
        if bytes_max is not None:
            kept = 0
            for message in reversed(rows):
                kept += stored_size(message.key, message.value, headers_text(message.headers))
                if kept > bytes_max:
                    start = max(start, message.offset + 1)
                    break
        return start

    def delete_below(self, topic: str, partition_id: int, offset: int) -> int:
        with self._lock:
            stored = self._messages.get((topic, partition_id), {})
            gone = [o for o in stored if o < offset]
            for o in gone:
                del stored[o]
        return len(gone)

    def forget_replica(self, topic: str, partition_id: int) -> None:
        with self._lock:
            self._replicas.pop((topic, partition_id), None)
            self._messages.pop((topic, partition_id), None)

    def close(self) -> None:
        pass
