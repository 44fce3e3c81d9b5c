"""The deterministic simulator's second workload: the managers' replicated registry
(``ManagerState`` through its ``Definition``, ``manager/raft.py``), driven by a seeded mix of
every command of ``manager.registry.commands`` (``python -m stress_tests.raft_sim
--workload manager``).

- **Commands** (``ManagerProposer``): made from what the proposing node's registry holds
  (``Workload.see``: the leader's, or a follower's, stale), as the managers make them, over
  small pools of broker ids, topics, groups, clients, keys and managers, so that commands
  meet each other: brokers register (first, as a cluster starts; and again elsewhere), are
  seen dead or alive, drain (their replicas then move away) and are removed; topics are
  created with placements on eligible brokers, grow, finish or roll back; replicas move
  (begin, retarget, finish); producers and consumers register and renew leases that
  expire; keys are made and revoked; managers join and leave; consumer groups are defined
  and redriven. Bounds are the proposer's ``protocol.limits.Limits``; a few commands carry
  ``TIGHT_BOUND`` (a manager configured lower) to reach the ``TOO_MANY`` refusals. Most
  commands are valid; the rest are refused by the state (unknown or stale names, busy
  moves, taken addresses, other settings under a name), and ``MALFORMED_P`` of them are
  malformed on purpose (``MALFORMED``: wrong types, bad ranges, bad hashes).
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

import dataclasses
import hashlib
import json
import pickle
import random
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, TypeVar

from manager.raft import REGISTRY
from manager.registry import commands as c
from manager.registry.commands import RegistryCommand, from_wire
from manager.registry.outcome import Outcome
from manager.registry.state import EXPIRED_PER_REGISTRATION_MAX, EXPIRED_PER_SWEEP_MAX, ManagerState
from manager.registry.topics import PartitionRecord
from protocol.access import Role
from protocol.group_requests import Ordering
from protocol.limits import Limits
from protocol.types import BrokerId
from runtime.replication.machine import Definition, Entry, ReplicatedMethod
from runtime.replication.raft.sim.checks import InvariantError
from runtime.replication.raft.sim.simulation import Workload

T = TypeVar("T")
Answer = tuple[Outcome, Entry]
ManagerDefinition = Definition[ManagerState, RegistryCommand, Answer]

LIMITS = Limits()
BROKER_IDS = (1, 2, 3, 4, 5)
"""Brokers that stay, mostly (one may drain and, once it holds no replica, be removed)."""
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
    """A replica's Raft address: a move's port is ``10_000 + number``, a placement's
    ``30_000 + 100 * number + ...``, so no two commands share one."""
    return f"b{broker_id}:{port}"


def _pick(rng: random.Random, known: Sequence[T], pool: Sequence[T], known_p: float = 0.85) -> T:
    """One of ``known`` (what the proposer's view holds) most of the time, else of ``pool``
    (maybe unknown to the state: a stale view, or a mistaken client)."""
    if known and rng.random() < known_p:
        return rng.choice(known)
    return rng.choice(pool)


def _eligible(view: ManagerState) -> list[int]:
    """Brokers a new replica may go to: registered and not draining (``manager.placement``)."""
    return [int(b.broker_id) for b in view.brokers.all() if not b.draining]


# --- brokers and managers ---------------------------------------------------------------


def _register_broker(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    everyone = BROKER_IDS + PASSING_BROKER_IDS
    unknown = [b for b in everyone if view.brokers.get(BrokerId(b)) is None]
    broker = _pick(rng, unknown, everyone, 0.6)
    low = 20_000 + 100 * broker + (500 if rng.random() < 0.1 else 0)  # 10%: moved ports
    brokers_max = _bound(rng, LIMITS.registry_brokers_max)
    return c.RegisterBroker(
        broker, f"http://b{broker}:8080", f"b{broker}", low, low + 99, brokers_max
    )


def _broker_state(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    everyone = BROKER_IDS + PASSING_BROKER_IDS
    known = [int(b.broker_id) for b in view.brokers.all()]
    draining = [int(b.broker_id) for b in view.brokers.all() if b.draining]
    roll = rng.random()
    if roll < 0.45:
        return c.SetBrokerAlive(_pick(rng, known, everyone), rng.random() < 0.6)
    if roll < 0.65:
        passing = [b for b in known if b in PASSING_BROKER_IDS]
        return c.DrainBroker(_pick(rng, passing, everyone, 0.7))
    if roll < 0.75:
        return c.CancelDrain(_pick(rng, draining, everyone))
    return c.RemoveBroker(_pick(rng, draining, PASSING_BROKER_IDS + BROKER_IDS[:1]))


def _manager_change(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    members = [m.manager_id for m in view.managers.effective(())]
    newcomers = [m for m in MANAGER_IDS if m not in members]
    add = rng.random() < 0.6
    manager = _pick(rng, newcomers if add else members, MANAGER_IDS)
    # 20%: another manager's Raft address (ADDRESS_TAKEN when that one is recorded).
    raft_manager = rng.choice(MANAGER_IDS) if rng.random() < 0.2 else manager
    url, address = f"http://m{manager}:8000", f"m{raft_manager}:7000"
    return c.AddManager(manager, url, address) if add else c.RemoveManager(manager, url, address)


# --- topics and replica moves -----------------------------------------------------------


def _assignment(
    rng: random.Random, number: int, slot: int, view: ManagerState
) -> tuple[tuple[BrokerId, str], ...]:
    """One partition's replicas on distinct eligible brokers (any of the pool when too few:
    a stale view), at addresses never used before (``slot`` < 10 tells a command's
    partitions apart)."""
    eligible = _eligible(view)
    replicas = rng.choice((1, LIMITS.replication_factor, LIMITS.replication_factor))
    brokers = rng.sample(eligible if len(eligible) >= replicas else BROKER_IDS, replicas)
    ports = [30_000 + 100 * number + 10 * slot + r for r in range(replicas)]
    pairs = zip(brokers, ports, strict=True)
    return tuple((BrokerId(b), _raft_address(b, port)) for b, port in pairs)


def _topic(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    creating = [t for t in view.topics.all() if t.creating]
    roll = rng.random()
    if roll < 0.35:
        return _begin_topic(rng, number, view)
    if roll < 0.5:
        growing = [t.name for t in view.topics.all() if not t.creating]
        name = _pick(rng, growing, TOPICS)
        known = view.topics.get(name)
        next_id = len(known.partitions) if known is not None else 0
        partition_id = next_id if rng.random() < 0.85 else rng.randrange(4)
        assignment = _assignment(rng, number, 9, view)
        partitions_max = _bound(rng, LIMITS.topic_partitions_max)
        return c.BeginPartition(
            name, partition_id, assignment, partitions_max, LIMITS.replication_factor
        )
    topic = rng.choice(creating) if creating and rng.random() < 0.9 else None
    ids = tuple(p.partition_id for p in topic.creating) if topic else (rng.randrange(3),)
    name = topic.name if topic else rng.choice(TOPICS)
    return c.FinishPartitions(name, ids) if roll < 0.9 else c.RollBackPartitions(name, ids)


def _begin_topic(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    new = [n for n in TOPICS if view.topics.get(n) is None]
    name = _pick(rng, new, TOPICS, 0.8)
    assignments = tuple(_assignment(rng, number, p, view) for p in range(rng.randint(1, 3)))
    return c.BeginTopic(
        name,
        assignments,
        _bound(rng, LIMITS.registry_topics_max),
        LIMITS.topic_partitions_max,
        LIMITS.replication_factor,
        LIMITS.partition_limits(),
    )


def _move(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    active = [(t.name, p) for t in view.topics.all() for p in t.partitions[: t.active_count]]
    moving = [(name, p) for name, p in active if p.moving is not None]
    roll = rng.random()
    if roll < 0.4 or not moving:
        return _begin_move(rng, number, view, active)
    name, partition = rng.choice(moving)
    if roll < 0.55 and partition.moving is not None:
        current = partition.replicas[partition.moving.replica_id].broker_id
        holders = {r.broker_id for r in partition.replicas} | {partition.moving.removed.broker_id}
        to = _pick(rng, [b for b in _eligible(view) if b not in holders], BROKER_IDS)
        address = _raft_address(to, 10_000 + number)
        return c.RetargetMove(name, partition.partition_id, current, to, address)
    return c.FinishMove(name, partition.partition_id)


def _begin_move(
    rng: random.Random, number: int, view: ManagerState, active: list[tuple[str, PartitionRecord]]
) -> RegistryCommand:
    """As the replica mover: a replica off a draining or dead broker, most of the time."""
    leaving = {int(b.broker_id) for b in view.brokers.all() if b.draining or not b.alive}
    stranded = [(n, p) for n, p in active if any(r.broker_id in leaving for r in p.replicas)]
    if not active:
        name, partition_id, replica, holders = rng.choice(TOPICS), rng.randrange(2), 0, set()
    else:
        name, partition = _pick(rng, stranded, active, 0.8)
        partition_id, replicas = partition.partition_id, partition.replicas
        away = [r.replica_id for r in replicas if r.broker_id in leaving]
        replica = _pick(rng, away, [r.replica_id for r in replicas])
        holders = {int(r.broker_id) for r in replicas}
    to = _pick(rng, [b for b in _eligible(view) if b not in holders], BROKER_IDS)
    moves_max = LIMITS.replica_moves_max + rng.randrange(2)  # 2: one move stalled
    address = _raft_address(to, 10_000 + number)
    return c.BeginMove(name, partition_id, replica, to, address, moves_max)


# --- clients, keys and consumer groups --------------------------------------------------


def _client(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    topics = [t.name for t in view.topics.all() if t.is_active]
    topic, now_ms = _pick(rng, topics, TOPICS, 0.9), _now_ms(number)
    record = view.topics.get(topic)
    partitions = record.active_count if record is not None else 1
    owner = rng.choice((None, None, KEY_IDS[0], KEY_IDS[1]))
    clients_max = _bound(rng, LIMITS.registry_clients_max)
    roll = rng.random()
    if roll < 0.45:
        count = rng.choice((None, None, rng.randint(1, max(partitions, 1))))
        producer = rng.choice(PRODUCERS)
        return c.RegisterProducer(producer, topic, clients_max, now_ms, LEASE_MS, count, owner)
    if roll < 0.9:
        partition = rng.choice((None, rng.randrange(max(partitions, 1))))
        consumer = rng.choice(CONSUMERS)
        return c.RegisterConsumer(consumer, topic, partition, clients_max, now_ms, LEASE_MS, owner)
    count_max = rng.choice((1, EXPIRED_PER_SWEEP_MAX))
    return c.ExpireIdleClients(now_ms, LEASE_MS, count_max)


def key_hash_of(key_id: str, other: bool = False) -> str:
    """The hash a key id's key has in the run (``other``: another key under that id)."""
    return hashlib.sha256(f"{key_id}{'/other' if other else ''}".encode()).hexdigest()


def _key(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    if rng.random() < 0.3:
        return c.RevokeKey(_pick(rng, [k.key_id for k in view.keys.records()], KEY_IDS))
    key_id = rng.choice(KEY_IDS)
    role = rng.choice(tuple(Role)).value
    topics = tuple(rng.sample(TOPICS, rng.randrange(3)))
    keys_max = _bound(rng, LIMITS.registry_keys_max)
    key_hash = key_hash_of(key_id, other=rng.random() < 0.15)
    return c.CreateKey(key_id, key_hash, role, topics, f"key {key_id}", _now_ms(number), keys_max)


def _group(rng: random.Random, number: int, view: ManagerState) -> RegistryCommand:
    defined = [(g.topic, g.group) for g in view.groups.all()]
    if rng.random() < 0.45 or not defined:
        return _define_group(rng, view)
    topic, group = rng.choice(defined)
    partition = rng.randrange(2)
    progress = view.groups.redrive_progress(topic, group, partition)
    planned = progress.planned or (progress.done_to, progress.done_to + 10)
    if progress.planned is None and rng.random() < 0.8:
        return c.PlanRedrive(topic, group, partition, *planned)
    return c.FinishRedrive(topic, group, partition, planned[1])


def _define_group(rng: random.Random, view: ManagerState) -> RegistryCommand:
    topics = [t.name for t in view.topics.all()]
    topic = _pick(rng, topics, TOPICS, 0.9)
    dead = rng.choice((None, None, _pick(rng, [t for t in topics if t != topic], TOPICS)))
    deliveries = rng.choice((0, 3)) if dead is None else rng.choice((1, 3))
    return c.DefineGroup(
        topic,
        rng.choice(GROUPS),
        rng.choice((LIMITS.group_visibility_timeout_ms_default, 5_000)),
        deliveries,
        dead,
        rng.choice(tuple(Ordering)).value,
        LIMITS.group_visibility_timeout_ms_min,
        LIMITS.group_visibility_timeout_ms_max,
        LIMITS.group_max_deliveries_max,
        _bound(rng, LIMITS.partition_groups_max),
    )


# --- the mix ------------------------------------------------------------------------------

Maker = Callable[[random.Random, int, ManagerState], RegistryCommand]
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
    (c.CancelDrain, "broker_id", 1.5),
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


def broken(command: RegistryCommand, name: str, value: object) -> RegistryCommand:
    """``command`` with its field ``name`` set to ``value`` (one of ``MALFORMED``)."""
    changes: dict[str, Any] = {name: value}
    return dataclasses.replace(command, **changes)


class ManagerProposer:
    """Makes the run's commands as the managers do: from what the proposing node's registry
    holds (``see``, before each proposal: the leader most of the time, any node else, so
    some commands are stale, as a real proposer's may be)."""

    def __init__(self) -> None:
        self.view = ManagerState()

    def see(self, state: ManagerState) -> None:
        self.view = _copy(state)

    def __call__(self, rng: random.Random, number: int) -> RegistryCommand:
        """The command of proposal ``number`` (its proposer's clock: ``_now_ms``)."""
        command = self._maker(rng)(rng, number, self.view)
        if rng.random() < MALFORMED_P:
            breaks = [(name, value) for kind, name, value in MALFORMED if isinstance(command, kind)]
            if breaks:
                name, value = rng.choice(breaks)
                command = broken(command, name, value)
        return command

    def _maker(self, rng: random.Random) -> Maker:
        """As a cluster starts: brokers register first, then topics are made; then ``MIX``."""
        if len(_eligible(self.view)) < LIMITS.replication_factor and rng.random() < 0.5:
            return _register_broker
        if not any(t.is_active for t in self.view.topics.all()) and rng.random() < 0.4:
            return _topic
        roll = rng.random()
        for share, maker in MIX:
            if roll < share:
                return maker
            roll -= share
        return MIX[-1][1]


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
            return Outcome.FAILED
        if not outcome.ok and registry_fingerprint(state) not in (before, advanced):
            self.violations.append(f"{wire!r} was refused ({outcome.value}) but changed the state")
        return outcome

    def fingerprint(self, state: ManagerState) -> str:
        if self.violations:
            raise InvariantError(self.violations[0])
        return registry_fingerprint(state)


def _copy(state: ManagerState) -> ManagerState:
    """A copy sharing nothing with ``state``, as a dump restores it (faster than
    ``copy.deepcopy``)."""
    copied: ManagerState = pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    return copied


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
    advanced = _copy(state)
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
    checked, proposer = CheckedApply(), ManagerProposer()
    return Workload(
        definition=manager_definition(checked),
        command=proposer,
        see=proposer.see,
        entry_of=_entry_of,
        fingerprint=checked.fingerprint,
        broken_definition=manager_definition(_diverging(checked)),
        describe=_describe,
    )
