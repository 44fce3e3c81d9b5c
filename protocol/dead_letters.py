"""The dead-letter step of consumer groups (issue 20): what a message past its group's
``max_deliveries`` becomes in the group's dead-letter topic. Pure.

The step has three parts, each repeatable without a duplicate, so a failover between any
two repeats the step and stores one copy:

1. The partition records the message as dead, with a *dead-letter sequence* taken in the
   order messages die (``GroupLeases.dead``, in the partition's Raft state).
2. The manager leader reads the partition leader's pending dead letters
   (``GET /dead-letters`` at brokers) and produces each, alone, to the dead-letter topic
   with the producer id ``dead_letter_producer_id(topic, partition, group)`` and the dead
   sequence as its sequence, routed as any produce (by key, else by that id and sequence):
   a repeat is recognised by the dead-letter partition as a retried batch. A
   ``SEQUENCE_OUT_OF_ORDER`` answer proves an earlier attempt stored it (the step
   produces a group's letters one at a time, in sequence order, each only after the one
   before was acknowledged).
3. The manager asks the partition leader to record them settled
   (``POST /groups/{group}/dead-lettered``): ``DeadLettered`` in the partition's log.

The copy carries the original key, value and headers, plus RaftQ's own headers
(``raftq-*``, which producers may not send, so a consumer can trust them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TypeVar

from protocol.errors import ErrorCode, RaftQError
from protocol.types import NewMessage, Offset, PartitionId, StoredMessage, headers_of

ORIGIN_TOPIC = "raftq-origin-topic"
ORIGIN_PARTITION = "raftq-origin-partition"
ORIGIN_OFFSET = "raftq-origin-offset"
ORIGIN_TIMESTAMP_MS = "raftq-origin-timestamp-ms"
GROUP = "raftq-group"
DELIVERY_COUNT = "raftq-delivery-count"
REASON = "raftq-reason"
REASON_MAX_DELIVERIES = "max_deliveries"
"""The only reason so far: delivered ``max_deliveries`` times without an ack."""

_PRODUCER_PREFIX = "raftq-dead-"
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PendingDeadLetter:
    """A message past its group's ``max_deliveries``, as its partition leader reports it."""

    topic: str
    partition_id: PartitionId
    group: str
    delivery_count: int
    sequence: int
    """Its dead-letter sequence: the sequence its copy is produced with."""
    message: StoredMessage

    def to_json(self) -> dict[str, object]:
        return {
            **self.message.to_json(self.topic, self.partition_id),
            "group": self.group,
            "delivery_count": self.delivery_count,
            "sequence": self.sequence,
        }

    @classmethod
    def from_json(cls, item: object) -> PendingDeadLetter:
        """Strict: a malformed entry raises ``RaftQError`` (INTERNAL: a broker's bug)."""
        if not isinstance(item, dict):
            raise _malformed("an entry is not an object")
        headers = item.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise _malformed("'headers' must be an object of strings")
        key = item.get("key")
        return cls(
            topic=_field(item, "topic", str),
            partition_id=PartitionId(_field(item, "partition_id", int)),
            group=_field(item, "group", str),
            delivery_count=_field(item, "delivery_count", int),
            sequence=_field(item, "sequence", int),
            message=StoredMessage(
                offset=Offset(_field(item, "offset", int)),
                key=key if isinstance(key, str) else None,
                value=_field(item, "message", str),
                timestamp_ms=_field(item, "timestamp_ms", int),
                headers=headers_of(headers),
            ),
        )

    def copy(self) -> NewMessage:
        """The message its dead-letter topic gets: the original, and where it came from."""
        origin = {
            ORIGIN_TOPIC: self.topic,
            ORIGIN_PARTITION: str(self.partition_id),
            ORIGIN_OFFSET: str(self.message.offset),
            ORIGIN_TIMESTAMP_MS: str(self.message.timestamp_ms),
            GROUP: self.group,
            DELIVERY_COUNT: str(self.delivery_count),
            REASON: REASON_MAX_DELIVERIES,
        }
        return NewMessage(
            key=self.message.key,
            value=self.message.value,
            headers=headers_of({**dict(self.message.headers), **origin}),
        )


def dead_letter_producer_id(topic: str, partition_id: int, group: str) -> str:
    """The producer id of one group's dead letters from one partition: fixed, so every
    manager leader repeats a step under the same id; hashed, to stay within
    ``id_chars_max`` whatever the names' lengths."""
    digest = hashlib.sha256(f"{topic}\x00{partition_id}\x00{group}".encode()).hexdigest()
    return _PRODUCER_PREFIX + digest[:40]


def _field(item: dict[str, object], name: str, kind: type[_T]) -> _T:
    value = item.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _malformed(f"field {name!r} must be a {kind.__name__}")
    return value


def _malformed(what: str) -> RaftQError:
    return RaftQError(ErrorCode.INTERNAL, f"a broker's dead letters: {what}")
