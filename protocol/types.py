"""Identifier types and plain-data records shared by every RaftQ component.

Ranges of offsets are half-open, ``[start, end)``, everywhere in RaftQ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NewType

from protocol.limits import PartitionLimits

Offset = NewType("Offset", int)
"""Position of a message in one partition, contiguous from 0. Never a Raft log index."""

PartitionId = NewType("PartitionId", int)
BrokerId = NewType("BrokerId", int)
ReplicaId = NewType("ReplicaId", int)
"""Index of a replica inside its partition's replica list (0, 1 or 2 with three replicas)."""

ProducerId = NewType("ProducerId", str)
ConsumerId = NewType("ConsumerId", str)
RequestId = NewType("RequestId", str)


class Durability(Enum):
    """What a produce acknowledgement waits for (the request's ``durability``)."""

    REPLICATED = "replicated"
    """Committed by Raft: a majority of replicas hold the batch in their journals, not yet
    synced. A crash of a minority loses nothing; a power cut of a majority at once can lose
    the last acknowledged batches."""
    FSYNC = "fsync"
    """The default: as ``replicated``, and on disk (journal fsynced) on a majority."""
    FLUSHED = "flushed"
    """As ``fsync``, and also in the database of a majority of replicas."""


class RaftRole(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    CANDIDATE = "candidate"


Headers = tuple[tuple[str, str], ...]
"""A message's headers: ``(name, value)`` pairs, sorted by name, each name once; ``()``
when it has none. A tuple, not a dict: messages are frozen, hashable and small in the Raft
log and in snapshots. On the wire (HTTP, Spark) they are a JSON object of strings."""

NO_HEADERS: Headers = ()


def headers_of(names_to_values: dict[str, str]) -> Headers:
    """The canonical form of a header map (sorted, so equal maps are equal tuples)."""
    return tuple(sorted(names_to_values.items())) if names_to_values else NO_HEADERS


@dataclass(frozen=True, slots=True, kw_only=True)
class NewMessage:
    """A message as a producer sends it, before it has an offset.

    Keyword-only, like ``StoredMessage``: key and value are both strings, so a positional
    call could swap them silently. Everywhere below the HTTP layer the order is key, then
    value, then headers (the broker's tuples, its ``msg_dict``, its table rows)."""

    key: str | None = None
    value: str
    headers: Headers = NO_HEADERS

    def to_json(self) -> dict[str, object]:
        """The message in a produce request's ``messages`` (fields left out when empty)."""
        body: dict[str, object] = {"message": self.value}
        if self.key is not None:
            body["key"] = self.key
        if self.headers:
            body["headers"] = dict(self.headers)
        return body


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """A committed message at its offset in a partition (keyword-only, see ``NewMessage``)."""

    offset: Offset
    key: str | None
    value: str
    timestamp_ms: int
    headers: Headers = NO_HEADERS

    def to_json(self, topic: str, partition_id: PartitionId) -> dict[str, object]:
        return {
            "topic": topic,
            "partition_id": partition_id,
            "offset": self.offset,
            "key": self.key,
            "message": self.value,
            "headers": dict(self.headers),
            "timestamp_ms": self.timestamp_ms,
        }


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)``; empty when ``start == end``."""

    start: Offset
    end: Offset

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    """Where one replica of a partition lives."""

    replica_id: ReplicaId
    broker_id: BrokerId
    address: str
    """The broker's HTTP base URL, e.g. ``http://127.0.0.1:17121``."""
    raft_address: str
    """``host:port`` of this replica's Raft node."""

    def to_json(self) -> dict[str, object]:
        return {
            "replica_id": self.replica_id,
            "broker_id": self.broker_id,
            "address": self.address,
            "raft_address": self.raft_address,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack:
    """What a produce acknowledgement achieved, for one partition's part of a batch (the
    ``ack`` of a broker's answer; the manager answers one per partition, in ``acks``)."""

    partition_id: PartitionId
    durability: Durability
    """What was asked for; everything below says what was achieved."""
    raft_term: int
    raft_index: int
    """The Raft entry holding the batch (a replayed batch: the entry of this answer's
    group, which found it already stored)."""
    replicas_synced: int
    """Replicas the leader knew to hold the entry on disk when it answered (0: asked for
    ``replicated``, not synced yet)."""
    replicas_flushed: int
    """Replicas whose database held the whole batch when it answered."""

    def to_json(self) -> dict[str, object]:
        return {
            "partition_id": self.partition_id,
            "durability": self.durability.value,
            "raft_term": self.raft_term,
            "raft_index": self.raft_index,
            "replicas_synced": self.replicas_synced,
            "replicas_flushed": self.replicas_flushed,
        }


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Everything a broker needs to host one replica of a partition.

    The manager sends it in ``POST /partitions``; the broker keeps it in its
    ``HostedReplicaRow`` table to rebuild the replica after a restart.
    """

    topic: str
    partition_id: PartitionId
    replica_id: ReplicaId
    replicas: tuple[ReplicaAddress, ...]
    limits: PartitionLimits | None = None
    """The partition's limits as the manager recorded them with the topic (``None``: a
    topic created before they were recorded; the broker then uses its own)."""
    leaving: ReplicaAddress | None = field(default=None, compare=False)
    """During a drain's move, the replica leaving the slot ``leaving.replica_id``: alive,
    and a member of the group until its replacement has caught up. The new replica's Raft
    node starts knowing it (``raft_partners``; as etcd's initial cluster lists every
    current member), since it may be the vote another member needs before the new one
    heard from the group; a replica copying what left memory asks it too (``peers``).
    Not part of a spec's identity (the broker does not store it; the mover sends it every
    round of the move)."""

    @property
    def raft_address(self) -> str:
        return self.replicas[self.replica_id].raft_address

    @property
    def partners(self) -> tuple[str, ...]:
        return tuple(r.raft_address for r in self.replicas if r.replica_id != self.replica_id)

    @property
    def raft_partners(self) -> tuple[str, ...]:
        """Whom this replica's Raft node knows when it is created: the other replicas,
        and the leaving one of a drain (see ``leaving``)."""
        leaving = () if self.leaving is None else (self.leaving.raft_address,)
        return (*self.partners, *leaving)

    @property
    def peers(self) -> tuple[ReplicaAddress, ...]:
        """The other replicas, then the leaving one of a drain: where a replica that fell
        behind copies from (its database may be the only one left holding a range)."""
        others = tuple(r for r in self.replicas if r.replica_id != self.replica_id)
        return others if self.leaving is None else (*others, self.leaving)

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "partition_id": self.partition_id,
            "replica_id": self.replica_id,
            "raft_address": self.raft_address,
            "partners": list(self.partners),
            "replicas": [r.to_json() for r in self.replicas],
            **({} if self.limits is None else {"limits": self.limits.to_json()}),
            **({} if self.leaving is None else {"leaving": self.leaving.to_json()}),
        }
