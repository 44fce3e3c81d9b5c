"""Topics, their partitions and where each partition's replicas live. Pure.

A partition is CREATING from the moment its placement is recorded until every replica's broker
has been told to host it (DESIGN §3, the Databus recorded steps); then it is ACTIVE. Partitions
are only ever added at the end and finished in order, so the ACTIVE ones are always a prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum

from manager.registry.outcome import Outcome
from protocol import snapshot_fields
from protocol.limits import PartitionLimits
from protocol.types import BrokerId, PartitionId, ReplicaId

Assignment = tuple[tuple[BrokerId, str], ...]
"""One partition's replicas as plain data for the Raft log: ``(broker_id, "host:port")`` per
replica, the replica id being the index."""


class PartitionState(Enum):
    CREATING = "creating"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    replica_id: ReplicaId
    broker_id: BrokerId
    raft_address: str
    """``host:port`` of this replica's Raft node; unique across every replica."""


@dataclass(frozen=True, slots=True)
class ReplicaMove:
    """Re-replication in progress: replica ``replica_id`` (in ``replicas`` already at its
    new place) replaces ``removed``, whose broker is dead. Done (``finish_move``) once the
    Raft group's members are the new ones and the new replica has caught up."""

    replica_id: ReplicaId
    removed: ReplicaPlacement


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    partition_id: PartitionId
    replicas: tuple[ReplicaPlacement, ...]
    state: PartitionState
    version: int
    moving: ReplicaMove | None = None

    # Snapshots written before ``moving`` existed hold four fields.
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    partitions: tuple[PartitionRecord, ...]
    version: int
    """The registry revision of its last change; only grows."""
    partition_limits: PartitionLimits | None = None
    """The limits every replica of its partitions applies with, fixed at its creation from
    the creating manager's limits (``None``: created before they were recorded)."""

    # Snapshots written before ``partition_limits`` existed hold three fields.
    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)

    @property
    def is_active(self) -> bool:
        """Its creation finished: producers and consumers may use it."""
        return self.partitions[0].state is PartitionState.ACTIVE

    @property
    def active_count(self) -> int:
        """Partitions that take messages (the ACTIVE prefix)."""
        count = 0
        for partition in self.partitions:
            if partition.state is not PartitionState.ACTIVE:
                break
            count += 1
        return count

    @property
    def creating(self) -> tuple[PartitionRecord, ...]:
        return tuple(p for p in self.partitions if p.state is PartitionState.CREATING)

    @property
    def moving(self) -> tuple[PartitionRecord, ...]:
        return tuple(p for p in self.partitions if p.moving is not None)


def valid_assignment(assignment: object, replicas_max: int) -> bool:
    """Well-formed plain data with distinct brokers and distinct Raft addresses."""
    if not isinstance(assignment, tuple) or not 1 <= len(assignment) <= replicas_max:
        return False
    for item in assignment:
        if not (isinstance(item, tuple) and len(item) == 2):
            return False
        broker_id, address = item
        if not isinstance(broker_id, int) or not isinstance(address, str) or ":" not in address:
            return False
    brokers = {item[0] for item in assignment}
    addresses = {item[1] for item in assignment}
    return len(brokers) == len(assignment) == len(addresses)


def _partition(partition_id: int, assignment: Assignment, version: int) -> PartitionRecord:
    replicas = tuple(
        ReplicaPlacement(ReplicaId(index), BrokerId(broker_id), address)
        for index, (broker_id, address) in enumerate(assignment)
    )
    return PartitionRecord(PartitionId(partition_id), replicas, PartitionState.CREATING, version)


class TopicRegistry:
    def __init__(self) -> None:
        self._topics: dict[str, TopicRecord] = {}
        self._raft_addresses: set[str] = set()
        """Every replica's Raft address, of every topic and state: two replicas never share one."""

    # --- reads -------------------------------------------------------------------------------
    def get(self, name: str) -> TopicRecord | None:
        return self._topics.get(name)

    def all(self) -> list[TopicRecord]:
        return [self._topics[name] for name in sorted(self._topics)]

    def __len__(self) -> int:
        return len(self._topics)

    def replica_count_by_broker(self) -> dict[BrokerId, int]:
        counts: dict[BrokerId, int] = {}
        for replica in self._replicas():
            counts[replica.broker_id] = counts.get(replica.broker_id, 0) + 1
        return counts

    def held_count_by_broker(self) -> dict[BrokerId, int]:
        """Replicas each broker holds: placed on it, or still moving away from it."""
        counts = self.replica_count_by_broker()
        for topic in self._topics.values():
            for partition in topic.partitions:
                if partition.moving is not None:
                    leaving = partition.moving.removed.broker_id
                    counts[leaving] = counts.get(leaving, 0) + 1
        return counts

    def holds_replicas(self, broker_id: BrokerId) -> bool:
        return self.held_count_by_broker().get(broker_id, 0) > 0

    def raft_ports_by_host(self) -> dict[str, set[int]]:
        """Ports taken on each Raft host, by replicas of any broker, topic and state, also
        by replicas that moved away (their address is never used again: a broker that was
        down may still run the old replica until it is told to drop it)."""
        ports: dict[str, set[int]] = {}
        for address in self._raft_addresses:
            host, port = address.rsplit(":", 1)
            ports.setdefault(host, set()).add(int(port))
        return ports

    def _replicas(self) -> Iterable[ReplicaPlacement]:
        for topic in self._topics.values():
            for partition in topic.partitions:
                yield from partition.replicas

    # --- commands (called from apply: total, never raise) -----------------------------------
    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        *,
        topics_max: int,
        partitions_max: int,
        replicas_max: int,
        version: int,
        partition_limits: PartitionLimits | None = None,
    ) -> Outcome:
        if not isinstance(name, str) or not name:
            return Outcome.INVALID
        if partition_limits is not None and not isinstance(partition_limits, PartitionLimits):
            return Outcome.INVALID
        if name in self._topics:
            return Outcome.EXISTS
        if len(self._topics) >= topics_max:
            return Outcome.TOO_MANY
        if not isinstance(assignments, tuple) or not 1 <= len(assignments) <= partitions_max:
            return Outcome.INVALID
        if not all(valid_assignment(a, replicas_max) for a in assignments):
            return Outcome.INVALID
        if self._addresses_taken(assignments):
            return Outcome.ADDRESS_TAKEN
        partitions = tuple(_partition(i, a, version) for i, a in enumerate(assignments))
        self._topics[name] = TopicRecord(name, partitions, version, partition_limits)
        self._raft_addresses.update(address for a in assignments for _, address in a)
        return Outcome.CREATED

    def begin_partition(
        self,
        name: str,
        partition_id: int,
        assignment: Assignment,
        *,
        partitions_max: int,
        replicas_max: int,
        version: int,
    ) -> Outcome:
        """Add partition ``partition_id``, which must be the next one (so a repeat is refused)."""
        if not isinstance(name, str) or not isinstance(partition_id, int):
            return Outcome.INVALID
        topic = self._topics.get(name)
        if topic is None:
            return Outcome.UNKNOWN_TOPIC
        if topic.creating:
            return Outcome.BUSY
        if partition_id != len(topic.partitions):
            return Outcome.EXISTS if 0 <= partition_id < len(topic.partitions) else Outcome.INVALID
        if len(topic.partitions) >= partitions_max:
            return Outcome.TOO_MANY
        if not valid_assignment(assignment, replicas_max):
            return Outcome.INVALID
        if self._addresses_taken((assignment,)):
            return Outcome.ADDRESS_TAKEN
        added = _partition(partition_id, assignment, version)
        self._topics[name] = replace(topic, partitions=(*topic.partitions, added), version=version)
        self._raft_addresses.update(address for _, address in assignment)
        return Outcome.CREATED

    def finish_partitions(
        self, name: str, partition_ids: tuple[int, ...], *, version: int
    ) -> Outcome:
        """Mark the named partitions ACTIVE; only the named ones, so a finisher never activates
        a partition begun after it sent its broker calls."""
        if not isinstance(name, str):
            return Outcome.INVALID
        topic = self._topics.get(name)
        if topic is None:
            return Outcome.UNKNOWN_TOPIC
        if not isinstance(partition_ids, tuple):
            return Outcome.INVALID
        if any(not isinstance(p, int) or not 0 <= p < len(topic.partitions) for p in partition_ids):
            return Outcome.UNKNOWN_PARTITION
        wanted = set(partition_ids)
        changed = False
        partitions = []
        for partition in topic.partitions:
            if partition.partition_id in wanted and partition.state is PartitionState.CREATING:
                partitions.append(replace(partition, state=PartitionState.ACTIVE, version=version))
                changed = True
            else:
                partitions.append(partition)
        if not changed:
            return Outcome.UNCHANGED
        self._topics[name] = replace(topic, partitions=tuple(partitions), version=version)
        return Outcome.UPDATED

    def roll_back(self, name: str, partition_ids: tuple[int, ...], *, version: int) -> Outcome:
        """Forget the named CREATING partitions, which must be every CREATING one (they are
        the last: the ACTIVE ones are a prefix), and the topic with them when none is left.
        Their Raft addresses stay taken (a broker may still run such a replica until it
        is told to drop it)."""
        topic = self._topics.get(name) if isinstance(name, str) else None
        if topic is None:
            return Outcome.UNKNOWN_TOPIC
        creating = tuple(p.partition_id for p in topic.creating)
        if not creating:
            return Outcome.UNCHANGED  # a repeat (or finished meanwhile)
        if not isinstance(partition_ids, tuple) or tuple(sorted(partition_ids)) != creating:
            return Outcome.INVALID
        kept = tuple(p for p in topic.partitions if p.state is PartitionState.ACTIVE)
        if kept:
            self._topics[name] = replace(topic, partitions=kept, version=version)
        else:
            del self._topics[name]
        return Outcome.UPDATED

    def begin_move(
        self,
        name: str,
        partition_id: int,
        replica_id: int,
        to: tuple[BrokerId, str],
        *,
        moves_max: int,
        version: int,
    ) -> Outcome:
        """Re-replication: replica ``replica_id`` of an ACTIVE partition goes to broker
        ``to[0]`` at Raft address ``to[1]``; the old placement is kept as ``moving.removed``
        until ``finish_move``. At most ``moves_max`` partitions move at once, one replica
        each; the new broker must not hold a replica of the partition already."""
        partition = self._active_partition(name, partition_id)
        if partition is None:
            return Outcome.UNKNOWN_PARTITION
        if not isinstance(replica_id, int) or not 0 <= replica_id < len(partition.replicas):
            return Outcome.INVALID
        if partition.moving is not None:
            same = partition.moving.replica_id == replica_id and (
                partition.replicas[replica_id].broker_id,
                partition.replicas[replica_id].raft_address,
            ) == tuple(to)
            return Outcome.UNCHANGED if same else Outcome.BUSY
        if sum(len(t.moving) for t in self._topics.values()) >= moves_max:
            return Outcome.BUSY
        if not valid_assignment((to,), 1):
            return Outcome.INVALID
        broker_id, address = to
        if any(r.broker_id == broker_id for r in partition.replicas):
            return Outcome.INVALID
        if address in self._raft_addresses:
            return Outcome.ADDRESS_TAKEN
        removed = partition.replicas[replica_id]
        placed = ReplicaPlacement(ReplicaId(replica_id), BrokerId(broker_id), address)
        replicas = tuple(placed if r.replica_id == replica_id else r for r in partition.replicas)
        moved = replace(
            partition,
            replicas=replicas,
            version=version,
            moving=ReplicaMove(ReplicaId(replica_id), removed),
        )
        self._replace_partition(name, moved, version)
        self._raft_addresses.add(address)
        return Outcome.UPDATED

    def retarget_move(
        self,
        name: str,
        partition_id: int,
        from_broker: int,
        to: tuple[BrokerId, str],
        *,
        version: int,
    ) -> Outcome:
        """A move whose new broker ``from_broker`` is gone before the move finished goes
        to broker ``to[0]`` at ``to[1]`` instead; what it replaces (``moving.removed``)
        stays, and the abandoned replica becomes a stray (dropped if its broker returns)."""
        partition = self._active_partition(name, partition_id)
        if partition is None or partition.moving is None:
            return Outcome.UNKNOWN_PARTITION if partition is None else Outcome.INVALID
        slot = partition.moving.replica_id
        current = partition.replicas[slot]
        if (current.broker_id, current.raft_address) == tuple(to):
            return Outcome.UNCHANGED
        if current.broker_id != from_broker or not valid_assignment((to,), 1):
            return Outcome.INVALID
        broker_id, address = to
        holders = {r.broker_id for r in partition.replicas} | {partition.moving.removed.broker_id}
        if broker_id in holders:
            return Outcome.INVALID
        if address in self._raft_addresses:
            return Outcome.ADDRESS_TAKEN
        placed = ReplicaPlacement(ReplicaId(slot), BrokerId(broker_id), address)
        replicas = tuple(placed if r.replica_id == slot else r for r in partition.replicas)
        self._replace_partition(
            name, replace(partition, replicas=replicas, version=version), version
        )
        self._raft_addresses.add(address)
        return Outcome.UPDATED

    def finish_move(self, name: str, partition_id: int, *, version: int) -> Outcome:
        """The move is done: forget the old placement (its address stays taken: a broker
        that comes back may still run it until told to drop it)."""
        partition = self._active_partition(name, partition_id)
        if partition is None:
            return Outcome.UNKNOWN_PARTITION
        if partition.moving is None:
            return Outcome.UNCHANGED
        self._replace_partition(name, replace(partition, version=version, moving=None), version)
        return Outcome.UPDATED

    def _active_partition(self, name: object, partition_id: object) -> PartitionRecord | None:
        topic = self._topics.get(name) if isinstance(name, str) else None
        if topic is None or not isinstance(partition_id, int):
            return None
        if not 0 <= partition_id < len(topic.partitions):
            return None
        partition = topic.partitions[partition_id]
        return partition if partition.state is PartitionState.ACTIVE else None

    def _replace_partition(self, name: str, partition: PartitionRecord, version: int) -> None:
        topic = self._topics[name]
        partitions = tuple(
            partition if p.partition_id == partition.partition_id else p for p in topic.partitions
        )
        self._topics[name] = replace(topic, partitions=partitions, version=version)

    def _addresses_taken(self, assignments: tuple[Assignment, ...]) -> bool:
        return any(address in self._raft_addresses for a in assignments for _, address in a)
