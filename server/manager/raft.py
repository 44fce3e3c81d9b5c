"""The managers' registry as a replicated state machine: what it hands the replication layer.

- Its state: a ``ManagerState`` (pure), stored in snapshots under ``state``.
- How a command travels: any ``manager.registry.commands`` command, in its wire form, is one
  entry, one call of ``write_command``; it applies as an ``Outcome``.
- The frozen table of its ``@replicated`` methods (``REGISTRY_METHODS``): a wire protocol.
- ``registry_raft`` (the managers' real group, pysyncobj) and ``registry_twin`` (its
  in-memory twin: one manager that always leads).
"""

from __future__ import annotations

from manager.config import ManagerConfig
from manager.registry.commands import RegistryCommand, from_wire, to_wire
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.registry.topics import Assignment
from runtime.replication.machine import Definition, Entry, ReplicatedMachine, ReplicatedMethod
from runtime.replication.memory import MemoryMachine
from runtime.replication.raft.machine import RaftConfig, RaftMachine

RegistryMachine = ReplicatedMachine[ManagerState, RegistryCommand, Outcome]
"""The managers' replicated registry: a command in, its outcome out."""
RegistryTwin = MemoryMachine[ManagerState, RegistryCommand, Outcome]


# --- legacy commands: replayed from old journals, never proposed ---------------------------
# Their signatures are those the journals were written with (an entry may name arguments).


def _begin_partition(
    s: ManagerState, name: str, partition_id: int, assignment: Assignment, parts_max: int, rf: int
) -> Outcome:
    return s.begin_partition(name, partition_id, assignment, parts_max, rf)


def _begin_topic(
    s: ManagerState,
    name: str,
    assignments: tuple[Assignment, ...],
    topics_max: int,
    parts_max: int,
    rf: int,
) -> Outcome:
    return s.begin_topic(name, assignments, topics_max, parts_max, rf)


def _finish_partitions(s: ManagerState, name: str, partition_ids: tuple[int, ...]) -> Outcome:
    return s.finish_partitions(name, partition_ids)


def _register_broker(
    s: ManagerState, broker_id: int, address: str, host: str, low: int, high: int, brokers_max: int
) -> Outcome:
    return s.register_broker(broker_id, address, host, low, high, brokers_max)


def _register_consumer(
    s: ManagerState, consumer_id: str, topic: str, partition_id: int | None, clients_max: int
) -> Outcome:
    return s.register_consumer(consumer_id, topic, partition_id, clients_max)


def _register_producer(s: ManagerState, producer_id: str, topic: str, clients_max: int) -> Outcome:
    return s.register_producer(producer_id, topic, clients_max)


def _set_broker_alive(s: ManagerState, broker_id: int, alive: bool) -> Outcome:
    return s.set_broker_alive(broker_id, alive)


def _sweep_idle_clients(s: ManagerState, now_ms: int, expiry_ms: int, count_max: int) -> Outcome:
    return s.expire_idle_clients(now_ms, expiry_ms, count_max)


def _upsert_consumer(
    s: ManagerState,
    consumer_id: str,
    topic: str,
    partition_id: int | None,
    clients_max: int,
    now_ms: int,
    expiry_ms: int,
) -> Outcome:
    return s.register_consumer(consumer_id, topic, partition_id, clients_max, now_ms, expiry_ms)


def _upsert_producer(
    s: ManagerState, producer_id: str, topic: str, clients_max: int, now_ms: int, expiry_ms: int
) -> Outcome:
    return s.register_producer(producer_id, topic, clients_max, now_ms, expiry_ms)


def _write_command(s: ManagerState, wire: tuple[object, ...]) -> Outcome:
    return s.apply(from_wire(wire))


REGISTRY_METHODS = (
    ReplicatedMethod("write_command", _write_command),
    ReplicatedMethod("begin_partition", _begin_partition),
    ReplicatedMethod("begin_topic", _begin_topic),
    ReplicatedMethod("finish_partitions", _finish_partitions),
    ReplicatedMethod("register_broker", _register_broker),
    ReplicatedMethod("register_consumer", _register_consumer),
    ReplicatedMethod("register_producer", _register_producer),
    ReplicatedMethod("set_broker_alive", _set_broker_alive),
    ReplicatedMethod("sweep_idle_clients", _sweep_idle_clients),
    ReplicatedMethod("upsert_consumer", _upsert_consumer),
    ReplicatedMethod("upsert_producer", _upsert_producer),
)
"""The managers' replicated methods: a wire protocol, frozen (see ``ReplicatedMethod``).

``write_command`` carries any command of ``manager.registry.commands`` and is the only one
proposed today. The others are how commands were proposed before: never proposed, kept
unchanged so old journals replay. pysyncobj numbers them by sorted ``name_v0``, from
``begin_partition`` 0 to ``write_command`` 10 (pinned by ``unit_tests/manager/
test_client_leases.py``); each new one sorted after every other (``sweep_idle_clients``,
``upsert_consumer``, ``upsert_producer``, then ``write_command``), so none renumbered the
others. A node of an older version cannot apply a newer one: upgrade every manager before
proposing."""


def _encode(command: RegistryCommand, _synced: bool) -> tuple[str, tuple[object, ...]]:
    return "write_command", (to_wire(command),)


def _outcome(value: object, _entry: Entry) -> Outcome:
    # A command that failed to apply (logged where it did) was applied as nothing.
    return value if isinstance(value, Outcome) else Outcome.FAILED


REGISTRY: Definition[ManagerState, RegistryCommand, Outcome] = Definition(
    new_state=ManagerState,
    state_attribute="state",
    methods=REGISTRY_METHODS,
    encode=_encode,
    result=_outcome,
)


def registry_raft(config: ManagerConfig) -> RaftMachine[ManagerState, RegistryCommand, Outcome]:
    """This manager's node of the managers' group (built in the serving process)."""
    raft = RaftConfig(
        name="the managers' registry",
        address=config.raft_address,
        partners=tuple(config.partner_raft_addresses),
        data_dir=str(config.data_dir),
        secret=config.secret,
        limits=config.limits,
        stem="manager",
    )
    return RaftMachine(REGISTRY, raft)


def registry_twin() -> RegistryTwin:
    """One manager that always leads and applies each command at once (tests)."""
    return MemoryMachine(REGISTRY, "the managers' registry")


def leads(raft: RegistryMachine) -> bool:
    """This manager leads and is caught up (it has applied an entry of its term, so its
    registry holds every committed command): only then may it answer from its registry, or
    act on it (a new leader may hold a stale registry until then)."""
    return raft.leads() and raft.caught_up()
