"""The manager's replicated state machine: every command the managers' Raft log carries. Pure.

Each command is deterministic (ids and bounds are arguments fixed by the proposer, so every
manager applies it the same way even if their configured limits briefly differ), total (bad
input returns an ``Outcome``, never raises) and stamps what it changes with the next revision,
a counter that only grows (the Storm KeySequenceNumber idea: a stale view can be detected).
"""

from __future__ import annotations

from manager.registry.brokers import BrokerRegistry
from manager.registry.clients import ClientRegistry
from manager.registry.commands import (
    AddManager,
    BeginMove,
    BeginPartition,
    BeginTopic,
    CancelDrain,
    CreateKey,
    DefineGroup,
    DrainBroker,
    ExpireIdleClients,
    FinishMove,
    FinishPartitions,
    FinishRedrive,
    PlanRedrive,
    RegisterBroker,
    RegisterConsumer,
    RegisterProducer,
    RegistryCommand,
    RemoveBroker,
    RemoveManager,
    RetargetMove,
    RevokeKey,
    RollBackPartitions,
    SetBrokerAlive,
)
from manager.registry.groups import GroupRegistry
from manager.registry.keys import KeyRecord, KeyRegistry
from manager.registry.managers import ManagerRegistry
from manager.registry.outcome import Outcome
from manager.registry.topics import Assignment, TopicRegistry
from protocol.access import Role
from protocol.limits import PartitionLimits
from protocol.types import BrokerId

_CHANGED = (Outcome.CREATED, Outcome.UPDATED)

EXPIRED_PER_REGISTRATION_MAX = 2
"""Idle clients a registration forgets on its way: more than the one it may add, so idle
ones never pile up even when no sweep runs."""
EXPIRED_PER_SWEEP_MAX = 10_000
"""Most clients one ``expire_idle_clients`` command forgets (bounds one apply's work)."""


class ManagerState:
    def __init__(self) -> None:
        self.topics = TopicRegistry()
        self.brokers = BrokerRegistry()
        self.clients = ClientRegistry()
        self.keys = KeyRegistry()
        self.managers = ManagerRegistry()
        self.groups = GroupRegistry()
        self.revision = 0
        """Revision of the last change; every record's ``version`` is one of these."""

    def __setstate__(self, state: dict[str, object]) -> None:
        """A dump from before API keys (or manager changes, or consumer groups) has none."""
        self.__dict__.update(state)
        if "keys" not in state:
            self.keys = KeyRegistry()
        if "managers" not in state:
            self.managers = ManagerRegistry()
        if "groups" not in state:
            self.groups = GroupRegistry()

    def apply(self, command: RegistryCommand | None) -> Outcome:
        """Run one replicated command (``None``: a malformed one, which changes nothing)."""
        match command:
            case BeginTopic(name, assignments, topics_max, partitions_max, replicas_max, limits):
                return self.begin_topic(
                    name, assignments, topics_max, partitions_max, replicas_max, limits
                )
            case BeginPartition(name, partition_id, assignment, partitions_max, replicas_max):
                return self.begin_partition(
                    name, partition_id, assignment, partitions_max, replicas_max
                )
            case FinishPartitions(name, partition_ids):
                return self.finish_partitions(name, partition_ids)
            case RegisterBroker(broker_id, address, host, low, high, brokers_max):
                return self.register_broker(broker_id, address, host, low, high, brokers_max)
            case SetBrokerAlive(broker_id, alive):
                return self.set_broker_alive(broker_id, alive)
            case RegisterProducer(producer_id, topic, clients_max, now_ms, expiry_ms, count, owner):
                return self.register_producer(
                    producer_id, topic, clients_max, now_ms, expiry_ms, count, owner
                )
            case RegisterConsumer(
                consumer_id, topic, partition_id, clients_max, now, expiry, owner
            ):
                return self.register_consumer(
                    consumer_id, topic, partition_id, clients_max, now, expiry, owner
                )
            case ExpireIdleClients(now_ms, expiry_ms, count_max):
                return self.expire_idle_clients(now_ms, expiry_ms, count_max)
            case CreateKey(key_id, key_hash, role, topics, name, created_ms, keys_max):
                return self.create_key(key_id, key_hash, role, topics, name, created_ms, keys_max)
            case RevokeKey(key_id):
                return self._stamp(self.keys.revoke(key_id))
        return self._apply_operation(command)

    def _apply_operation(self, command: RegistryCommand | None) -> Outcome:
        """``apply``'s commands of the operations that run a cluster (moves, drains, manager
        changes) and of consumer groups."""
        match command:
            case BeginMove(name, partition_id, replica_id, to_broker, to_address, moves_max):
                return self.begin_move(
                    name, partition_id, replica_id, to_broker, to_address, moves_max
                )
            case RollBackPartitions(name, partition_ids):
                return self._stamp(
                    self.topics.roll_back(name, partition_ids, version=self.revision + 1)
                )
            case AddManager(manager_id, http_url, raft_address):
                return self._stamp(self.managers.add(manager_id, http_url, raft_address))
            case RemoveManager(manager_id, http_url, raft_address):
                return self._stamp(self.managers.remove(manager_id, http_url, raft_address))
            case DrainBroker(broker_id):
                return self._stamp(self.brokers.drain(broker_id, version=self.revision + 1))
            case CancelDrain(broker_id):
                return self._stamp(self.brokers.cancel_drain(broker_id, version=self.revision + 1))
            case RemoveBroker(broker_id):
                return self.remove_broker(broker_id)
            case RetargetMove(name, partition_id, from_broker, to_broker, to_address):
                if not isinstance(to_broker, int) or self.brokers.get(BrokerId(to_broker)) is None:
                    return Outcome.UNKNOWN_BROKER
                return self._stamp(
                    self.topics.retarget_move(
                        name,
                        partition_id,
                        from_broker,
                        (BrokerId(to_broker), to_address),
                        version=self.revision + 1,
                    )
                )
            case FinishMove(name, partition_id):
                return self._stamp(
                    self.topics.finish_move(name, partition_id, version=self.revision + 1)
                )
            case DefineGroup():
                return self.define_group(command)
            case PlanRedrive(topic, group, partition_id, start, end):
                outcome = self.groups.plan_redrive(topic, group, partition_id, start, end)
                return self._stamp(outcome)
            case FinishRedrive(topic, group, partition_id, end):
                return self._stamp(self.groups.finish_redrive(topic, group, partition_id, end))
        return Outcome.INVALID

    def _stamp(self, outcome: Outcome) -> Outcome:
        if outcome in _CHANGED:
            self.revision += 1
        return outcome

    def _known_brokers(self, assignments: tuple[Assignment, ...]) -> bool:
        try:
            return all(self.brokers.get(BrokerId(b)) is not None for a in assignments for b, _ in a)
        except (TypeError, ValueError):
            return False

    def begin_topic(
        self,
        name: str,
        assignments: tuple[Assignment, ...],
        topics_max: int,
        partitions_max: int,
        replicas_max: int,
        partition_limits: PartitionLimits | None = None,
    ) -> Outcome:
        if isinstance(assignments, tuple) and not self._known_brokers(assignments):
            return Outcome.UNKNOWN_BROKER
        return self._stamp(
            self.topics.begin_topic(
                name,
                assignments,
                topics_max=topics_max,
                partitions_max=partitions_max,
                replicas_max=replicas_max,
                version=self.revision + 1,
                partition_limits=partition_limits,
            )
        )

    def begin_partition(
        self,
        name: str,
        partition_id: int,
        assignment: Assignment,
        partitions_max: int,
        replicas_max: int,
    ) -> Outcome:
        if isinstance(assignment, tuple) and not self._known_brokers((assignment,)):
            return Outcome.UNKNOWN_BROKER
        return self._stamp(
            self.topics.begin_partition(
                name,
                partition_id,
                assignment,
                partitions_max=partitions_max,
                replicas_max=replicas_max,
                version=self.revision + 1,
            )
        )

    def finish_partitions(self, name: str, partition_ids: tuple[int, ...]) -> Outcome:
        return self._stamp(
            self.topics.finish_partitions(name, partition_ids, version=self.revision + 1)
        )

    def begin_move(
        self,
        name: str,
        partition_id: int,
        replica_id: int,
        to_broker_id: int,
        to_raft_address: str,
        moves_max: int,
    ) -> Outcome:
        if not isinstance(to_broker_id, int) or self.brokers.get(BrokerId(to_broker_id)) is None:
            return Outcome.UNKNOWN_BROKER
        if not _positive_int(moves_max):
            return Outcome.INVALID
        return self._stamp(
            self.topics.begin_move(
                name,
                partition_id,
                replica_id,
                (BrokerId(to_broker_id), to_raft_address),
                moves_max=moves_max,
                version=self.revision + 1,
            )
        )

    def remove_broker(self, broker_id: int) -> Outcome:
        """Only once no replica is placed on it, nor moving away from it."""
        if not isinstance(broker_id, int):
            return Outcome.INVALID
        if self.topics.holds_replicas(BrokerId(broker_id)):
            return Outcome.BUSY
        return self._stamp(self.brokers.remove(broker_id, version=self.revision + 1))

    def register_broker(
        self,
        broker_id: int,
        address: str,
        raft_host: str,
        raft_port_min: int,
        raft_port_max: int,
        brokers_max: int,
    ) -> Outcome:
        return self._stamp(
            self.brokers.register(
                broker_id,
                address,
                raft_host,
                raft_port_min,
                raft_port_max,
                brokers_max=brokers_max,
                version=self.revision + 1,
            )
        )

    def set_broker_alive(self, broker_id: int, alive: bool) -> Outcome:
        return self._stamp(self.brokers.set_alive(broker_id, alive, version=self.revision + 1))

    def expire_idle_clients(self, now_ms: int, expiry_ms: int, count_max: int) -> Outcome:
        """Forget at most ``count_max`` registrations not renewed for over ``expiry_ms``."""
        if not all(_positive_int(v) for v in (now_ms, expiry_ms, count_max)):
            return Outcome.INVALID
        forgotten = self.clients.advance(now_ms, expiry_ms, min(count_max, EXPIRED_PER_SWEEP_MAX))
        return self._stamp(Outcome.UPDATED if forgotten else Outcome.UNCHANGED)

    def _advance_clients(self, now_ms: int | None, expiry_ms: int | None) -> bool:
        """Registry time and a little expiry before a registration; False when the times are
        not valid. ``None`` comes only from commands journaled before leases."""
        if not all(v is None or _positive_int(v) for v in (now_ms, expiry_ms)):
            return False
        self.clients.advance(now_ms, expiry_ms, EXPIRED_PER_REGISTRATION_MAX)
        return True

    def register_producer(
        self,
        producer_id: str,
        topic: str,
        clients_max: int,
        now_ms: int | None = None,
        expiry_ms: int | None = None,
        partition_count: int | None = None,
        owner: str | None = None,
    ) -> Outcome:
        """Register, or renew the lease of, a producer; pin ``partition_count`` for it
        unless one is pinned already (``ClientRegistry.add_producer``)."""
        record = self.topics.get(topic) if isinstance(topic, str) else None
        if record is None:
            return Outcome.UNKNOWN_TOPIC
        if partition_count is not None and not (
            _positive_int(partition_count) and partition_count <= len(record.partitions)
        ):
            return Outcome.INVALID
        if not self._advance_clients(now_ms, expiry_ms):
            return Outcome.INVALID
        return self._stamp(
            self.clients.add_producer(
                producer_id,
                topic,
                clients_max=clients_max,
                version=self.revision + 1,
                partition_count=partition_count,
                owner=owner,
            )
        )

    def register_consumer(
        self,
        consumer_id: str,
        topic: str,
        partition_id: int | None,
        clients_max: int,
        now_ms: int | None = None,
        expiry_ms: int | None = None,
        owner: str | None = None,
    ) -> Outcome:
        """Register, or renew the lease of, a consumer."""
        record = self.topics.get(topic) if isinstance(topic, str) else None
        if record is None:
            return Outcome.UNKNOWN_TOPIC
        if partition_id is not None and not (
            isinstance(partition_id, int) and 0 <= partition_id < len(record.partitions)
        ):
            return Outcome.UNKNOWN_PARTITION
        if not self._advance_clients(now_ms, expiry_ms):
            return Outcome.INVALID
        return self._stamp(
            self.clients.add_consumer(
                consumer_id,
                topic,
                partition_id,
                clients_max=clients_max,
                version=self.revision + 1,
                owner=owner,
            )
        )

    def create_key(
        self,
        key_id: str,
        key_hash: str,
        role: str,
        topics: tuple[str, ...],
        name: str,
        created_ms: int,
        keys_max: int,
    ) -> Outcome:
        try:
            parsed = Role(role)
        except ValueError:
            return Outcome.INVALID
        record = KeyRecord(key_id, key_hash, parsed, topics, name, created_ms, self.revision + 1)
        return self._stamp(self.keys.add(record, keys_max))

    def define_group(self, command: DefineGroup) -> Outcome:
        """A consumer group of an existing topic, its dead-letter topic existing too."""
        dead = command.dead_letter_topic
        named = (command.topic,) if dead is None else (command.topic, dead)
        if not all(isinstance(t, str) and self.topics.get(t) is not None for t in named):
            return Outcome.UNKNOWN_TOPIC
        return self._stamp(self.groups.define(command.entry(self.revision + 1), command.bounds()))


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
