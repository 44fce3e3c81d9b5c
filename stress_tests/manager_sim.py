"""The deterministic simulator's second workload: the managers' replicated registry
(``ManagerState`` through its ``Definition``, ``manager/raft.py``), driven by a seeded mix of
every command of ``manager.registry.commands`` (``python -m stress_tests.raft_sim
--workload manager``).

- **Commands** (``manager_command``): drawn from small pools of broker ids, topics, groups,
  clients, keys and managers, so that commands meet each other: brokers register (and
  re-register elsewhere), topics are created with placements, grow, finish or roll back,
  replicas move (begin, retarget, finish), brokers drain and are removed, producers and
  consumers register and renew leases that expire, keys are made and revoked, managers
  join and leave, consumer groups are defined and redriven. Bounds are the proposer's
  ``protocol.limits.Limits``; a few commands carry ``TIGHT_BOUND`` (a manager configured
  lower) to reach the ``TOO_MANY`` refusals. Most are valid; many are refused by the state
  (unknown topics and brokers, busy moves, repeats), and ``MALFORMED_P`` of them are
  malformed on purpose (wrong types, bad ranges, bad hashes).
- **Fingerprint** (``registry_fingerprint``): a digest of ``registry_document``, a plain,
  deterministic serialization of the whole state (every attribute, removed brokers and the
  lease clock included; dict order kept, as a lease's order is state; sets sorted). It
  refuses a value it has no plain form for rather than fall back on a ``repr``.
- **Its own checks** (``CheckedApply``, reported where the simulator next reads a state):
  apply is total (it never raises, also on a malformed command), and a refused command (an
  outcome that is not ``ok``) changes nothing; a registration may first move the lease
  clock and expire idle clients on its way (``ManagerState.register_producer``), so its
  refusal may leave the state so advanced and nothing else.

The ``Definition`` is the managers' own (methods table, codec, state) except for what
its proposer is answered: the outcome and the ``Entry`` that carried it (the simulator
checks an acknowledgement's promise; the managers need the outcome only).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from enum import Enum

from manager.raft import REGISTRY
from manager.registry import commands as c
from manager.registry.commands import RegistryCommand, from_wire
from manager.registry.outcome import Outcome
from manager.registry.state import EXPIRED_PER_REGISTRATION_MAX, EXPIRED_PER_SWEEP_MAX, ManagerState
from protocol.access import Role
from protocol.group_requests import Ordering
from protocol.limits import Limits
from protocol.types import BrokerId
from runtime.replication.machine import Definition, Entry, ReplicatedMethod
from runtime.replication.raft.sim.checks import InvariantError
from runtime.replication.raft.sim.simulation import Workload

Answer = tuple[Outcome, Entry]
ManagerDefinition = Definition[ManagerState, RegistryCommand, Answer]

LIMITS = Limits()
BROKER_IDS = (1, 2, 3, 4, 5)
"""Brokers that topics are placed on; drained now and then, never removed."""
PASSING_BROKER_IDS = (6, 7)
"""Brokers that register, drain and are removed (a removed id is refused from then on)."""
TOPICS = ("t0", "t1", "t2", "t3")
GROUPS = ("g0", "g1")
PRODUCERS = ("p0", "p1", "p2")
CONSUMERS = ("c0", "c1", "c2")
KEY_IDS = tuple(f"{0xA11CE0 + i:012x}" for i in range(4))
MANAGER_IDS = (2, 3, 4)
STEP_MS = 20
"""Proposer clock per proposal number (a proposal's ``now_ms``)."""
LEASE_MS = 600
"""The registration lease of the run (a real one is ``client_idle_expiry_s``): short, so
leases run out within a run of ~90 proposals."""
TIGHT_BOUND = 3
"""A bound some commands carry instead of ``LIMITS``' (a manager configured lower)."""
TIGHT_P = 0.1
MALFORMED_P = 0.1


def _now_ms(number: int) -> int:
    return 1_000 + STEP_MS * number


def _bound(rng: random.Random, configured: int) -> int:
    return TIGHT_BOUND if rng.random() < TIGHT_P else configured


def _raft_address(broker_id: int, port: int) -> str:
    return f"b{broker_id}:{port}"


# --- brokers and managers ---------------------------------------------------------------


def _register_broker(rng: random.Random, number: int) -> RegistryCommand:
    broker = rng.choice(BROKER_IDS + PASSING_BROKER_IDS)
    low = 20_000 + 100 * broker + (500 if rng.random() < 0.1 else 0)  # 10%: moved ports
    brokers_max = _bound(rng, LIMITS.registry_brokers_max)
    return c.RegisterBroker(
        broker, f"http://b{broker}:8080", f"b{broker}", low, low + 99, brokers_max
    )


def _broker_state(rng: random.Random, number: int) -> RegistryCommand:
    everyone = BROKER_IDS + PASSING_BROKER_IDS
    roll = rng.random()
    if roll < 0.5:
        return c.SetBrokerAlive(rng.choice(everyone), rng.random() < 0.6)
    if roll < 0.7:
        return c.DrainBroker(rng.choice(everyone))
    if roll < 0.85:
        return c.CancelDrain(rng.choice(everyone))
    return c.RemoveBroker(rng.choice(PASSING_BROKER_IDS + BROKER_IDS[:1]))


def _manager_change(rng: random.Random, number: int) -> RegistryCommand:
    manager = rng.choice(MANAGER_IDS)
    # 20%: another manager's Raft address (ADDRESS_TAKEN when that one is recorded).
    raft_manager = rng.choice(MANAGER_IDS) if rng.random() < 0.2 else manager
    url, address = f"http://m{manager}:8000", f"m{raft_manager}:7000"
    if rng.random() < 0.75:
        return c.AddManager(manager, url, address)
    return c.RemoveManager(manager, url, address)


# --- topics and replica moves -----------------------------------------------------------


def _assignment(rng: random.Random, number: int, slot: int) -> tuple[tuple[BrokerId, str], ...]:
    """One partition's replicas on distinct brokers, at addresses never used before
    (``slot`` < 10 tells a command's partitions apart)."""
    count = rng.choice((1, LIMITS.replication_factor, LIMITS.replication_factor))
    brokers = rng.sample(BROKER_IDS, count)
    ports = [30_000 + 100 * number + 10 * slot + r for r in range(count)]
    pairs = zip(brokers, ports, strict=True)
    return tuple((BrokerId(b), _raft_address(b, port)) for b, port in pairs)


def _topic(rng: random.Random, number: int) -> RegistryCommand:
    name = rng.choice(TOPICS)
    roll = rng.random()
    if roll < 0.4:
        assignments = tuple(_assignment(rng, number, p) for p in range(rng.randint(1, 3)))
        topics_max = _bound(rng, LIMITS.registry_topics_max)
        return c.BeginTopic(
            name,
            assignments,
            topics_max,
            LIMITS.topic_partitions_max,
            LIMITS.replication_factor,
            LIMITS.partition_limits(),
        )
    if roll < 0.55:
        partitions_max = _bound(rng, LIMITS.topic_partitions_max)
        assignment = _assignment(rng, number, 9)
        return c.BeginPartition(
            name, rng.randrange(4), assignment, partitions_max, LIMITS.replication_factor
        )
    if roll < 0.9:
        return c.FinishPartitions(name, tuple(range(rng.randint(1, 4))))
    first = rng.randrange(3)
    return c.RollBackPartitions(name, tuple(range(first, first + rng.randint(1, 2))))


def _move(rng: random.Random, number: int) -> RegistryCommand:
    name, partition = rng.choice(TOPICS), rng.randrange(2)
    to_broker = rng.choice(BROKER_IDS)
    address = _raft_address(to_broker, 40_000 + number)
    roll = rng.random()
    if roll < 0.45:
        replica = rng.randrange(LIMITS.replication_factor)
        moves_max = LIMITS.replica_moves_max + rng.randrange(2)  # 2: with a stalled move
        return c.BeginMove(name, partition, replica, to_broker, address, moves_max)
    if roll < 0.6:
        return c.RetargetMove(name, partition, rng.choice(BROKER_IDS), to_broker, address)
    return c.FinishMove(name, partition)


# --- clients, keys and consumer groups --------------------------------------------------


def _client(rng: random.Random, number: int) -> RegistryCommand:
    topic, now_ms = rng.choice(TOPICS), _now_ms(number)
    owner = rng.choice((None, None, KEY_IDS[0], KEY_IDS[1]))
    clients_max = _bound(rng, LIMITS.registry_clients_max)
    roll = rng.random()
    if roll < 0.45:
        count = rng.choice((None, None, 1, 2))
        producer = rng.choice(PRODUCERS)
        return c.RegisterProducer(producer, topic, clients_max, now_ms, LEASE_MS, count, owner)
    if roll < 0.9:
        partition = rng.choice((None, 0, 1))
        consumer = rng.choice(CONSUMERS)
        return c.RegisterConsumer(consumer, topic, partition, clients_max, now_ms, LEASE_MS, owner)
    count_max = rng.choice((1, EXPIRED_PER_SWEEP_MAX))
    return c.ExpireIdleClients(now_ms, LEASE_MS, count_max)


def key_hash_of(key_id: str, other: bool = False) -> str:
    """The hash a key id's key has in the run (``other``: another key under that id)."""
    return hashlib.sha256(f"{key_id}{'/other' if other else ''}".encode()).hexdigest()


def _key(rng: random.Random, number: int) -> RegistryCommand:
    key_id = rng.choice(KEY_IDS)
    if rng.random() < 0.3:
        return c.RevokeKey(key_id)
    role = rng.choice(tuple(Role)).value
    topics = tuple(rng.sample(TOPICS, rng.randrange(3)))
    keys_max = _bound(rng, LIMITS.registry_keys_max)
    key_hash = key_hash_of(key_id, other=rng.random() < 0.15)
    return c.CreateKey(key_id, key_hash, role, topics, f"key {key_id}", _now_ms(number), keys_max)


def _group(rng: random.Random, number: int) -> RegistryCommand:
    topic, group = rng.choice(TOPICS), rng.choice(GROUPS)
    roll = rng.random()
    if roll < 0.5:
        dead = rng.choice((None, None, rng.choice(TOPICS)))
        deliveries = rng.choice((0, 3)) if dead is None else rng.choice((1, 3))
        return c.DefineGroup(
            topic,
            group,
            rng.choice((LIMITS.group_visibility_timeout_ms_default, 5_000)),
            deliveries,
            dead,
            rng.choice(tuple(Ordering)).value,
            LIMITS.group_visibility_timeout_ms_min,
            LIMITS.group_visibility_timeout_ms_max,
            LIMITS.group_max_deliveries_max,
            _bound(rng, LIMITS.partition_groups_max),
        )
    partition, start = rng.randrange(2), 10 * rng.randrange(3)
    if roll < 0.75:
        return c.PlanRedrive(topic, group, partition, start, start + 10)
    return c.FinishRedrive(topic, group, partition, start + 10)


# --- the mix ------------------------------------------------------------------------------

Maker = Callable[[random.Random, int], RegistryCommand]
MIX: tuple[tuple[float, Maker], ...] = (
    (0.12, _register_broker),
    (0.08, _broker_state),
    (0.05, _manager_change),
    (0.22, _topic),
    (0.08, _move),
    (0.25, _client),
    (0.08, _key),
    (0.12, _group),
)
"""Each kind of command's share of the proposals."""

MALFORMED: tuple[tuple[type[RegistryCommand], str, object], ...] = (
    (c.RegisterBroker, "broker_id", "b1"),
    (c.RegisterBroker, "raft_port_max", 0),
    (c.SetBrokerAlive, "alive", "yes"),
    (c.DrainBroker, "broker_id", None),
    (c.RemoveBroker, "broker_id", "b6"),
    (c.AddManager, "manager_id", 0),
    (c.AddManager, "raft_address", "no port"),
    (c.RemoveManager, "manager_id", True),
    (c.BeginTopic, "name", ""),
    (c.BeginTopic, "assignments", [[1, "b1:1"]]),
    (c.BeginTopic, "partition_limits", "not limits"),
    (c.BeginPartition, "assignment", ((1, "b1:1"), (1, "b1:2"))),
    (c.FinishPartitions, "partition_ids", [0]),
    (c.RollBackPartitions, "partition_ids", "0"),
    (c.BeginMove, "moves_max", 0),
    (c.BeginMove, "to_raft_address", "no port"),
    (c.RetargetMove, "to_broker_id", "b2"),
    (c.FinishMove, "partition_id", -1),
    (c.RegisterProducer, "now_ms", -5),
    (c.RegisterProducer, "partition_count", 0),
    (c.RegisterConsumer, "partition_id", "x"),
    (c.RegisterConsumer, "expiry_ms", 0),
    (c.ExpireIdleClients, "count_max", 0),
    (c.CreateKey, "role", "root"),
    (c.CreateKey, "key_hash", "not a hash"),
    (c.CreateKey, "key_id", "NOT-HEX"),
    (c.RevokeKey, "key_id", 7),
    (c.DefineGroup, "visibility_timeout_ms", 0),
    (c.DefineGroup, "ordering", "random"),
    (c.PlanRedrive, "end", 0),
    (c.FinishRedrive, "end", "10"),
)
"""A field of a command and a value that breaks it: the state must refuse the command
(``INVALID`` or another refusal) and change nothing."""


def manager_command(rng: random.Random, number: int) -> RegistryCommand:
    """The command of proposal ``number`` (its proposer's clock: ``_now_ms``)."""
    roll, maker = rng.random(), MIX[-1][1]
    for share, candidate in MIX:
        if roll < share:
            maker = candidate
            break
        roll -= share
    command = maker(rng, number)
    if rng.random() < MALFORMED_P:
        breaks = [(name, value) for kind, name, value in MALFORMED if isinstance(command, kind)]
        if breaks:
            name, value = rng.choice(breaks)
            command = dataclasses.replace(command, **{name: value})
    return command


# --- the fingerprint ----------------------------------------------------------------------


def registry_document(value: object, depth: int = 0) -> object:
    """``value`` (a ``ManagerState``, or any part of one) as plain JSON data, equal for equal
    states: every attribute of the registry's classes, dataclass fields in order, dicts as
    their pairs in order, sets sorted. ``TypeError`` for a value with no plain form."""
    if depth > 30:
        raise ValueError("registry state nested too deep")
    deeper = depth + 1
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Enum):
        return [type(value).__name__, registry_document(value.value, deeper)]
    if isinstance(value, dict):
        pairs = value.items()
        return [
            "dict",
            [[registry_document(k, deeper), registry_document(v, deeper)] for k, v in pairs],
        ]
    if isinstance(value, list | tuple):
        return ["seq", [registry_document(item, deeper) for item in value]]
    if isinstance(value, set | frozenset):
        items = (json.dumps(registry_document(item, deeper)) for item in value)
        return ["set", sorted(items)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        values = [registry_document(getattr(value, f.name), deeper) for f in fields]
        return [type(value).__name__, values]
    if type(value).__module__.startswith("manager.registry") and hasattr(value, "__dict__"):
        return [type(value).__name__, registry_document(dict(vars(value)), deeper)]
    raise TypeError(f"no plain form for a {type(value).__name__} in the registry state")


def registry_fingerprint(state: ManagerState) -> str:
    """A digest of ``registry_document(state)``."""
    text = json.dumps(registry_document(state), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- the workload's own checks, and the definition -------------------------------------

_WRITE_COMMAND = REGISTRY.method("write_command")
Apply = Callable[[ManagerState, tuple[object, ...]], Outcome]


class CheckedApply:
    """The managers' ``write_command``, checking that apply is total and that a refusal
    changes nothing. A violation is kept and raised (``InvariantError``) by ``fingerprint``,
    where the simulator next reads a state: an exception inside apply would be taken by
    the replication layer (applied as nothing), never by the simulator."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def __call__(self, state: ManagerState, wire: tuple[object, ...]) -> Outcome:
        before = registry_fingerprint(state)
        advanced = _lease_advanced(state, from_wire(wire))
        try:
            outcome = _WRITE_COMMAND.apply(state, wire)
        except Exception as exc:
            self.violations.append(f"apply raised {exc!r} on {wire!r}")
            raise
        if not isinstance(outcome, Outcome):
            self.violations.append(f"apply answered {outcome!r} to {wire!r}")
        elif not outcome.ok and registry_fingerprint(state) not in (before, advanced):
            self.violations.append(f"{wire!r} was refused ({outcome.value}) but changed the state")
        return outcome

    def fingerprint(self, state: ManagerState) -> str:
        if self.violations:
            raise InvariantError(self.violations[0])
        return registry_fingerprint(state)


def _lease_advanced(state: ManagerState, command: RegistryCommand | None) -> str | None:
    """For a registration with valid times: the fingerprint of ``state`` once the lease
    clock moved and idle clients expired as its apply does before anything else may refuse
    it (``ManagerState.register_producer``)."""
    if not isinstance(command, c.RegisterProducer | c.RegisterConsumer):
        return None
    now_ms, expiry_ms = command.now_ms, command.expiry_ms
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (now_ms, expiry_ms)
    ):
        return None
    advanced = copy.deepcopy(state)
    advanced.clients.advance(now_ms, expiry_ms, EXPIRED_PER_REGISTRATION_MAX)
    return registry_fingerprint(advanced)


def _diverging(apply: Apply) -> Apply:
    """The broken variant: every command, then one more registration (a replica that
    applies something else)."""
    extra = c.RegisterBroker(
        99, "http://b99:8080", "b99", 29_900, 29_999, LIMITS.registry_brokers_max
    )

    def write_command(state: ManagerState, wire: tuple[object, ...]) -> Outcome:
        outcome = apply(state, wire)
        state.apply(extra)
        return outcome

    return write_command


def _answer(value: object, entry: Entry) -> Answer:
    return REGISTRY.result(value, entry), entry


def manager_definition(write_command: Apply) -> ManagerDefinition:
    """``REGISTRY`` with ``write_command`` applied by ``write_command``, its proposer
    answered the outcome and the entry."""
    methods = tuple(
        ReplicatedMethod(m.name, write_command, m.synced, m.version)
        if m.name == _WRITE_COMMAND.name
        else m
        for m in REGISTRY.methods
    )
    return Definition(
        new_state=REGISTRY.new_state,
        state_attribute=REGISTRY.state_attribute,
        methods=methods,
        encode=REGISTRY.encode,
        result=_answer,
        freeze=REGISTRY.freeze,
    )


def _entry_of(answer: Answer) -> Entry:
    return answer[1]


def _describe(answer: Answer) -> str:
    return answer[0].value


def manager_workload() -> Workload[ManagerState, RegistryCommand, Answer]:
    checked = CheckedApply()
    return Workload(
        definition=manager_definition(checked),
        command=manager_command,
        entry_of=_entry_of,
        fingerprint=checked.fingerprint,
        broken_definition=manager_definition(_diverging(checked)),
        describe=_describe,
    )
