"""The manager's replicated commands: the one list. Pure.

Each command is a small frozen record; ``ManagerState.apply`` runs it; the replicated
registry (``manager.raft``) carries it as a plain tuple (``to_wire``/``from_wire``: a tag and
the fields), never as a pickled class, so renaming or moving a class here can never break a
journal on disk. The registry's machine (Raft, or its in-memory twin) has one
``propose(command)``; nothing else lists the commands.

Every argument a command needs to apply deterministically is in it: bounds the proposer
read from its configuration, the proposer's clock (``now_ms``) and the registration
lease (``expiry_ms``), so every manager applies it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from manager.registry.groups import GroupBounds, GroupEntry
from manager.registry.topics import Assignment
from protocol.command_codec import CommandCodec
from protocol.limits import PartitionLimits


@dataclass(frozen=True, slots=True)
class BeginTopic:
    name: str
    assignments: tuple[Assignment, ...]
    topics_max: int
    partitions_max: int
    replicas_max: int
    partition_limits: PartitionLimits
    """Recorded with the topic: every replica of its partitions applies with them."""


@dataclass(frozen=True, slots=True)
class BeginPartition:
    name: str
    partition_id: int
    assignment: Assignment
    partitions_max: int
    replicas_max: int


@dataclass(frozen=True, slots=True)
class FinishPartitions:
    name: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RollBackPartitions:
    """A topic's creation (or a partition's addition) that cannot finish: a broker it was
    placed on is gone. Forgets its CREATING partitions (``TopicRegistry.roll_back``)."""

    name: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BeginMove:
    """Re-replication: replica ``replica_id`` of a partition goes to ``to_broker_id`` at
    Raft address ``to_raft_address`` (``TopicRegistry.begin_move``)."""

    name: str
    partition_id: int
    replica_id: int
    to_broker_id: int
    to_raft_address: str
    moves_max: int


@dataclass(frozen=True, slots=True)
class RetargetMove:
    """A move's new broker ``from_broker_id`` is gone before the move finished: the slot
    goes to ``to_broker_id`` at ``to_raft_address`` instead."""

    name: str
    partition_id: int
    from_broker_id: int
    to_broker_id: int
    to_raft_address: str


@dataclass(frozen=True, slots=True)
class FinishMove:
    name: str
    partition_id: int


@dataclass(frozen=True, slots=True)
class DrainBroker:
    """``raftq broker remove`` step 1: no new replicas; its replicas move away."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class CancelDrain:
    """``raftq broker remove --cancel``: the broker takes replicas again and no more of
    its replicas move (a move under way finishes: it is safe to, and undoing one is not)."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class RemoveBroker:
    """Step 2, once it holds no replica: forget it, and refuse its id from then on."""

    broker_id: int


@dataclass(frozen=True, slots=True)
class AddManager:
    """A manager joins (recorded before its Raft node is added to the group)."""

    manager_id: int
    http_url: str
    raft_address: str


@dataclass(frozen=True, slots=True)
class RemoveManager:
    """A manager left (recorded after its Raft node was removed from the group); its id
    is never taken again."""

    manager_id: int
    http_url: str
    raft_address: str


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    broker_id: int
    address: str
    raft_host: str
    raft_port_min: int
    raft_port_max: int
    brokers_max: int


@dataclass(frozen=True, slots=True)
class SetBrokerAlive:
    broker_id: int
    alive: bool


@dataclass(frozen=True, slots=True)
class RegisterProducer:
    """Register, or renew the lease of, a producer."""

    producer_id: str
    topic: str
    clients_max: int
    now_ms: int
    expiry_ms: int
    partition_count: int | None = None
    """The partition count to pin for this producer (``None``: pin nothing). Added later:
    commands journaled before it have no such field."""
    owner: str | None = None
    """The registering API key's id (issue 23; ``None``: a node, or an admin acting for
    another key's id). Added later, like ``partition_count``."""


@dataclass(frozen=True, slots=True)
class RegisterConsumer:
    """Register, or renew the lease of, a consumer."""

    consumer_id: str
    topic: str
    partition_id: int | None
    clients_max: int
    now_ms: int
    expiry_ms: int
    owner: str | None = None
    """As ``RegisterProducer.owner`` (added later)."""


@dataclass(frozen=True, slots=True)
class ExpireIdleClients:
    now_ms: int
    expiry_ms: int
    count_max: int


@dataclass(frozen=True, slots=True)
class CreateKey:
    """An API key: its hash only (the key is shown once, to whoever asked for it)."""

    key_id: str
    key_hash: str
    role: str
    """A ``protocol.access.Role`` value (the journal holds plain data)."""
    topics: tuple[str, ...]
    name: str
    created_ms: int
    keys_max: int


@dataclass(frozen=True, slots=True)
class RevokeKey:
    key_id: str


@dataclass(frozen=True, slots=True)
class DefineGroup:
    """A consumer group of ``topic`` with its settings (issue 20); the same again is
    ``UNCHANGED``, other settings under the same name ``EXISTS`` (``GroupRegistry``)."""

    topic: str
    group: str
    visibility_timeout_ms: int
    max_deliveries: int
    dead_letter_topic: str | None
    ordering: str
    """A ``protocol.requests.Ordering`` value."""
    visibility_timeout_ms_min: int
    visibility_timeout_ms_max: int
    max_deliveries_max: int
    groups_max: int
    """Groups the topic may have: the proposer's ``partition_groups_max``, or the lower
    bound its topic's partitions apply with."""

    def entry(self, version: int) -> GroupEntry:
        return GroupEntry(
            self.topic,
            self.group,
            self.visibility_timeout_ms,
            self.max_deliveries,
            self.dead_letter_topic,
            self.ordering,
            version,
        )

    def bounds(self) -> GroupBounds:
        return GroupBounds(
            self.visibility_timeout_ms_min,
            self.visibility_timeout_ms_max,
            self.max_deliveries_max,
            self.groups_max,
        )


@dataclass(frozen=True, slots=True)
class PlanRedrive:
    """Consumer group ``group`` of ``topic`` is redriving its letters in ``[start, end)``
    of its dead-letter topic's partition ``partition_id`` (``GroupRegistry.plan_redrive``)."""

    topic: str
    group: str
    partition_id: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class FinishRedrive:
    """The planned range, up to ``end``, is redriven (``GroupRegistry.finish_redrive``)."""

    topic: str
    group: str
    partition_id: int
    end: int


RegistryCommand = (
    BeginTopic
    | BeginPartition
    | FinishPartitions
    | RegisterBroker
    | SetBrokerAlive
    | RegisterProducer
    | RegisterConsumer
    | ExpireIdleClients
    | CreateKey
    | RevokeKey
    | BeginMove
    | FinishMove
    | DrainBroker
    | RemoveBroker
    | RollBackPartitions
    | AddManager
    | RemoveManager
    | RetargetMove
    | CancelDrain
    | DefineGroup
    | PlanRedrive
    | FinishRedrive
)

_TAGS: dict[str, type[RegistryCommand]] = {
    "begin_topic": BeginTopic,
    "begin_partition": BeginPartition,
    "finish_partitions": FinishPartitions,
    "register_broker": RegisterBroker,
    "set_broker_alive": SetBrokerAlive,
    "register_producer": RegisterProducer,
    "register_consumer": RegisterConsumer,
    "expire_idle_clients": ExpireIdleClients,
    "create_key": CreateKey,
    "revoke_key": RevokeKey,
    "begin_move": BeginMove,
    "finish_move": FinishMove,
    "drain_broker": DrainBroker,
    "remove_broker": RemoveBroker,
    "roll_back_partitions": RollBackPartitions,
    "add_manager": AddManager,
    "remove_manager": RemoveManager,
    "retarget_move": RetargetMove,
    "cancel_drain": CancelDrain,
    "define_group": DefineGroup,
    "plan_redrive": PlanRedrive,
    "finish_redrive": FinishRedrive,
}
"""The wire tag of each command: part of the journal format, never renamed."""


def _begin_topic(values: tuple[object, ...]) -> tuple[object, ...] | None:
    try:  # its partition limits travel as JSON (a plain dict)
        return (*values[:-1], PartitionLimits.from_json(values[-1]))
    except ValueError:
        return None


def _plain(value: object) -> object:
    """Field values as plain data (the journal holds no pickled class of ours)."""
    return value.to_json() if isinstance(value, PartitionLimits) else value


_CODEC = CommandCodec[RegistryCommand](
    _TAGS, {BeginTopic: _begin_topic}, plain=_plain, drop_trailing_defaults=True
)
"""Trailing fields at their defaults are left out of the wire form: the decoder gives them
back, and a manager of an older version, which knows fewer fields, still applies a command
that uses none of the newer ones. The tag, the arity and the partition limits are checked
here; ``ManagerState`` checks the other values."""


def command_name(command: RegistryCommand) -> str:
    return _CODEC.name(command)


def to_wire(command: RegistryCommand) -> tuple[object, ...]:
    return _CODEC.to_wire(command)


def from_wire(wire: object) -> RegistryCommand | None:
    """The command a wire tuple holds, or ``None`` when it is not one (apply must not
    raise)."""
    return _CODEC.from_wire(wire)
