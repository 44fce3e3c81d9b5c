"""The simulator's moves workload: a partition's replicas each flush into a database of
their own, brokers are lost for good or drained, and re-replication moves their replicas to
new nodes, with the broker's and the manager's own code (issue 19's items 1 and 4).

Per node, as a broker hosts a replica: a ``PartitionReplica`` over the simulated node and a
``Flusher`` into a ``MemoryMessageStore`` (the database; it outlives a crash, as SQLite's
synchronous commits do, and is gone with a lost node). The mover follows
``ReplicaMover``'s steps: ``_slot_to_move`` (the manager's own function) picks the slot,
the new node is hosted before it joins (step 3; ``host_first``), every live broker gets
the new spec, a leaving leader hands leadership to a caught-up replica, the group's leader
runs ``PartitionReplica.replace_member`` each round until the members match, and the move
finishes once the new replica is caught up and has flushed up to the evicted offset and
as far as the slowest other replica (``ReplicaMover._caught_up``).

A blocking call cannot wait here (one thread ticks every node), so the replica's machine
(``PendingMachine``) submits a proposal or a membership change once and answers
COMMIT_TIMEOUT (the Raft layer's "outcome unknown") until its answer came; the flusher and
the mover repeat their rounds, as they do after a timeout, and a repeat gets the answer.

Checked, beside the group's own checks: at each move's end and at every step with no move
under way, every slot's flushed offset (on the leader's applied state, up to date) is held
by the database of the replica the slot names, without a hole from the log start (item 4:
a flush mark must never claim rows a database lacks); and every move finishes once the
faults stop (item 1: a move must not leave its partition without a leader).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from broker.partition.commands import Command
from broker.partition.log import PartitionLog
from broker.partition.raft import GroupApplied
from broker.partition.replica import PartitionReplica
from broker.persistence.flusher import Flusher
from broker.persistence.store import MemoryMessageStore
from manager.registry.brokers import BrokerRecord
from manager.registry.topics import (
    PartitionRecord,
    PartitionState,
    ReplicaMove,
    ReplicaPlacement,
)
from manager.replica_mover import _slot_to_move
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.types import (
    BrokerId,
    PartitionId,
    ReplicaAddress,
    ReplicaId,
    ReplicaSpec,
    StoredMessage,
)
from runtime.replication.machine import Entry, RaftStatus
from runtime.replication.raft.machine import RaftMachine
from runtime.replication.raft.sim.checks import InvariantError
from runtime.replication.raft.sim.nodes import SimNode
from runtime.replication.raft.sim.operations import World

T = TypeVar("T")
Node = SimNode[PartitionLog, Sequence[Command], GroupApplied]
PartitionWorld = World[PartitionLog, Sequence[Command], GroupApplied]
SlotToMove = Callable[[PartitionRecord, set[BrokerId], dict[BrokerId, BrokerRecord]], int | None]

TOPIC = "sim"
REPLICAS = 3
ANSWERS_KEPT_MAX = 64
"""Answers kept for calls not repeated (yet): the oldest go first."""
PENDING_STEPS_MAX = 50
"""A call unanswered for this many steps (1 s) timed out: its repeat submits it again (a
forwarded proposal whose answer the network dropped is never answered; the real call's
bound is ``raft_commit_timeout_s``)."""


def moves_limits() -> Limits:
    """Small batches and a small lag bound, so that flush rounds are many and a replica
    that falls behind copies from a peer's database."""
    return Limits(flush_batch_messages_max=16, partition_replica_lag_messages_max=24)


class PendingMachine:
    """``PartitionMachine`` over one simulated node (see the module's docstring)."""

    def __init__(self, node: Node, step: Callable[[], int]) -> None:
        self._node = node
        self._step = step
        self._answers: dict[object, object] = {}
        self._pending: dict[object, int] = {}
        """Calls submitted and not answered yet, with the step they were submitted at."""

    @property
    def name(self) -> str:
        return self._node.address

    def propose(self, command: Sequence[Command], *, synced: bool = True) -> GroupApplied:
        machine = self._up()
        key = ("propose", self._node.incarnation, tuple(command), synced)
        answer = self._await(key, lambda done: machine.submit(command, done, synced=synced))
        return answer  # type: ignore[return-value]

    def change_member(self, address: str, *, add: bool) -> None:
        machine = self._up()
        key = ("member", self._node.incarnation, address, add)
        self._await(key, lambda done: machine.start_member_change(address, add, done))

    def _await(self, key: object, start: Callable[[Callable[[object], None]], None]) -> object:
        if key in self._answers:
            answer = self._answers.pop(key)
            if isinstance(answer, RaftQError):
                raise answer
            return answer
        if self._step() - self._pending.get(key, -PENDING_STEPS_MAX) >= PENDING_STEPS_MAX:
            self._pending[key] = self._step()

            def answered(value: object) -> None:
                self._pending.pop(key, None)
                self._answers[key] = value
                while len(self._answers) > ANSWERS_KEPT_MAX:
                    del self._answers[next(iter(self._answers))]

            try:
                start(answered)
            except RaftQError:
                self._pending.pop(key, None)
                raise
        raise RaftQError(ErrorCode.COMMIT_TIMEOUT, f"{self.name}: no answer yet")

    def _up(self) -> RaftMachine[PartitionLog, Sequence[Command], GroupApplied]:
        machine = self._node.machine
        if machine is None:
            raise RaftQError(ErrorCode.UNAVAILABLE, f"{self.name} is down")
        return machine

    def read(self, query: Callable[[PartitionLog], T]) -> T:
        return self._up().read(query)

    def status(self) -> RaftStatus:
        return self._up().status()

    def leads(self) -> bool:
        return self._up().leads()

    def caught_up(self) -> bool:
        return self._up().caught_up()

    def members(self) -> frozenset[str]:
        return self._up().members()

    def member_holds(self, address: str, index: int) -> bool:
        return self._up().member_holds(address, index)

    def transfer_leadership(self, address: str | None) -> None:
        self._up().transfer_leadership(address)

    def replicas_answering(self) -> int:
        return self._up().replicas_answering()

    def replicas_holding(self, entry: Entry) -> int:
        return self._up().replicas_holding(entry)

    def close(self) -> None:
        pass  # the simulation stops its nodes

    def discard(self) -> None:
        pass


@dataclass(slots=True)
class SimBroker:
    """What a broker keeps for its one replica here: the replica, its database, its
    flusher."""

    node: Node
    slot: ReplicaId
    replica: PartitionReplica
    store: MemoryMessageStore
    flusher: Flusher


@dataclass(slots=True)
class Move:
    slot: ReplicaId
    leaving: str
    new: str
    hosted: bool = False
    steps: int = 0


@dataclass(slots=True)
class Moves:
    """The operations of the moves workload (``World``'s ``Operations``)."""

    world: PartitionWorld
    limits: Limits
    slot_to_move: SlotToMove = _slot_to_move
    host_first: bool = True
    """``ReplicaMover``'s step 3: the new replica runs before it joins (issue 19, item 1's
    fix; before it, a new replica was hosted once the members matched)."""
    slots: list[str] = field(default_factory=list)
    """Slot -> the Raft address the partition's placement names (the manager's record)."""
    brokers: dict[str, SimBroker] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    draining: set[str] = field(default_factory=set)
    move: Move | None = None
    steps: int = 0

    def __post_init__(self) -> None:
        nodes = sorted(self.world.nodes().items())
        self.slots = [address for address, _ in nodes[:REPLICAS]]
        for slot, (_, node) in enumerate(nodes[:REPLICAS]):
            self._broker(node, ReplicaId(slot))

    # --- the scheduler's actions ----------------------------------------------------------

    def act(self, rng: random.Random) -> str:
        """Lose a broker for good, or start a drain. At most one replica of the placement
        is lost at a time (the group tolerates one failure; a second before the first is
        replaced is beyond what three replicas promise); neither takes a move's new one (its
        re-targeting is not modelled)."""
        if rng.random() < 0.5:
            choices = [a for a in self.slots if a not in self.lost]
            if self.move is not None:
                choices = [a for a in choices if a != self.move.new]
            if self._lost_member() or not choices:
                return "lose: not now"
            address = rng.choice(choices)
            self.lost.add(address)
            self.world.nodes()[address].wipe()
            return f"lose {address} for good"
        choices = [a for a in self.slots if a not in self.draining | self.lost]
        if self.move is not None:
            choices = [a for a in choices if a != self.move.new]
        if self.draining & set(self.slots) or not choices:
            return "drain: not now"
        address = rng.choice(choices)
        self.draining.add(address)
        return f"drain {address}"

    def _lost_member(self) -> bool:
        """A lost replica is still a member: one the placement names, or the one a move
        is taking out."""
        leaving = () if self.move is None else (self.move.leaving,)
        return any(a in self.lost for a in (*self.slots, *leaving))

    # --- every step -----------------------------------------------------------------------

    def after_tick(self) -> None:
        self.steps += 1
        for broker in list(self.brokers.values()):
            if broker.node.up and broker.node.address not in self.lost:
                # No leader, or an answer to come: the next round repeats.
                with contextlib.suppress(RaftQError):
                    broker.flusher.flush_once()
        self._mover_round()

    def check(self) -> None:
        """The databases' check, whenever no move is under way and the leader has applied
        all it committed (its state then names the slots' holders the placement names)."""
        leader = self.world.leader()
        if self.move is not None or leader is None or leader.machine is None:
            return
        status = leader.machine.status()
        if status.last_applied == status.commit_index:
            self._check_databases(leader)

    def unfinished(self) -> str | None:
        gone = [a for a in self.slots if a in self.lost or a in self.draining]
        if self.move is not None:
            return f"the move of slot {self.move.slot} to {self.move.new}"
        return f"replicas to move off {gone}" if gone else None

    # --- the mover ------------------------------------------------------------------------

    def _mover_round(self) -> None:
        if self.move is None:
            slot = self.slot_to_move(self._record(), self._gone(), self._broker_records())
            if slot is None:
                return
            self._begin(ReplicaId(slot))
        self._advance()

    def _begin(self, slot: ReplicaId) -> None:
        new = self.world.fresh_node()
        leaving = self.slots[slot]
        self.move = Move(slot, leaving, new.address)
        self.slots[slot] = new.address
        for address in self.slots:  # the new placement's brokers; not the leaving one
            broker = self.brokers.get(address)
            if broker is not None:
                broker.replica.respec(self._spec(broker.slot))
        self.world.note(f"     begin move of slot {slot}: {leaving} -> {new.address}")

    def _advance(self) -> None:
        move = self.move
        assert move is not None
        move.steps += 1
        if self.host_first and not move.hosted:
            self._host(move)
        leader = self.world.leader()
        if leader is None:
            return
        if leader.address == move.leaving:
            self._hand_off(leader, move)
            return
        broker = self.brokers.get(leader.address)
        if broker is None:
            return
        try:
            matched = broker.replica.replace_member(
                move.slot, move.leaving, move.leaving not in self.lost
            )
        except RaftQError as exc:
            if exc.code is not ErrorCode.COMMIT_TIMEOUT:
                self.world.note(f"     move: {exc.code.name} {exc.message}")
            return
        if not matched:
            return
        if not move.hosted:
            self._host(move)
            return
        if self._caught_up(leader, move):
            self._finish(leader, move)

    def _host(self, move: Move) -> None:
        node = self.world.nodes()[move.new]
        self.world.host(node, self._spec(move.slot).raft_partners)  # ``partition_raft``'s
        self._broker(node, move.slot)
        move.hosted = True

    def _hand_off(self, leader: Node, move: Move) -> None:
        """``ReplicaMover._lead_elsewhere``: a caught-up replica that is not the slot's."""
        candidates = [
            self.world.nodes()[a]
            for s, a in enumerate(self.slots)
            if s != move.slot and a not in self.lost and self.world.nodes()[a].up
        ]
        ready = [n for n in candidates if n.machine is not None and n.machine.caught_up()]
        if ready and leader.machine is not None:
            target = ready[move.steps % len(ready)]
            leader.machine.transfer_leadership(target.address)

    def _caught_up(self, leader: Node, move: Move) -> bool:
        """``ReplicaMover._caught_up`` on the new replica's own state, and (for the
        databases' check) a leader that applied all it committed."""
        new = self.world.nodes()[move.new]
        if new.machine is None or leader.machine is None or not new.machine.caught_up():
            return False
        flushed, evicted = new.machine.read(
            lambda log: (list(log.flushed_offsets), log.evicted_offset)
        )
        evicted_max = max(
            [evicted]
            + [
                n.machine.read(lambda log: log.evicted_offset)
                for n in self.world.nodes().values()
                if n.machine is not None and n.address in self.slots
            ]
        )
        others = [f for slot, f in enumerate(flushed) if slot != move.slot]
        status = leader.machine.status()
        return (
            flushed[move.slot] >= evicted_max
            and flushed[move.slot] >= min(others)
            and status.last_applied == status.commit_index
        )

    def _finish(self, leader: Node, move: Move) -> None:
        self.world.note(f"     finish move of slot {move.slot} after {move.steps} rounds")
        self._check_databases(leader)
        self.move = None
        self.draining.discard(move.leaving)
        old = self.brokers.pop(move.leaving, None)
        if old is not None and move.leaving not in self.lost:
            old.node.wipe()  # a drained broker drops the replica

    # --- the registry's records, as the manager holds them ----------------------------------

    def _record(self) -> PartitionRecord:
        move = None
        if self.move is not None:
            removed = ReplicaPlacement(self.move.slot, _broker_id(self.move.leaving), "")
            move = ReplicaMove(self.move.slot, removed)
        replicas = tuple(
            ReplicaPlacement(ReplicaId(s), _broker_id(a), a) for s, a in enumerate(self.slots)
        )
        return PartitionRecord(PartitionId(0), replicas, PartitionState.ACTIVE, 0, move)

    def _gone(self) -> set[BrokerId]:
        return {_broker_id(a) for a in self.lost | self.draining}

    def _broker_records(self) -> dict[BrokerId, BrokerRecord]:
        """Alive: up and not lost. A crashed broker stops answering the managers' polls at
        once here (really after ``broker_dead_after_s``); while it is down no drain starts
        (a restarted replica knows only the members its log names, and pysyncobj drops
        messages from any other node: a drain of both of them while it was down left it
        deaf to the group for good, moves seed 60 before this)."""
        return {
            _broker_id(address): BrokerRecord(
                broker_id=_broker_id(address),
                address="http://sim",
                raft_host="sim",
                raft_port_min=0,
                raft_port_max=0,
                alive=node.up and address not in self.lost,
                version=0,
                draining=address in self.draining,
            )
            for address, node in self.world.nodes().items()
        }

    def _spec(self, slot: ReplicaId) -> ReplicaSpec:
        """``replica_specs``: the placement, and a move's leaving replica while it lives."""
        replicas = tuple(
            ReplicaAddress(ReplicaId(s), _broker_id(a), "http://sim", a)
            for s, a in enumerate(self.slots)
        )
        move, leaving = self.move, None
        if move is not None and move.leaving not in self.lost:
            leaving = ReplicaAddress(
                move.slot, _broker_id(move.leaving), "http://sim", move.leaving
            )
        return ReplicaSpec(TOPIC, PartitionId(0), slot, replicas, leaving=leaving)

    def _broker(self, node: Node, slot: ReplicaId) -> None:
        replica = PartitionReplica(
            self._spec(slot), PendingMachine(node, lambda: self.steps), self.limits
        )
        store = MemoryMessageStore()
        flusher = Flusher(replica, store, self.limits, self._peer_read)
        self.brokers[node.address] = SimBroker(node, slot, replica, store, flusher)

    def _peer_read(self, spec: ReplicaSpec, start: int, end: int) -> list[StoredMessage]:
        """``PeerCopy.read``: ``[start, end)`` from the first of ``spec.peers`` whose
        database holds all of it; a peer that is down, lost, or not caught up (a fetch
        refuses then) answers nothing."""
        end = min(end, start + self.limits.fetch_messages_max)
        for peer in spec.peers:
            broker = self.brokers.get(peer.raft_address)
            machine = None if broker is None else broker.node.machine
            if broker is None or machine is None or not machine.caught_up():
                continue
            rows = broker.store.read_messages(TOPIC, 0, start, end)
            if [m.offset for m in rows] == list(range(start, end)):
                return rows
        raise RaftQError(ErrorCode.UNAVAILABLE, f"no peer could give [{start}, {end})")

    # --- the databases' check ---------------------------------------------------------------

    def _check_databases(self, leader: Node) -> None:
        """Every slot's flushed offset on ``leader``'s applied state is in the database of
        the replica the slot names, from the log start without a hole."""
        assert leader.machine is not None
        start, flushed = leader.machine.read(
            lambda log: (log.log_start_offset, list(log.flushed_offsets))
        )
        for slot, offset in enumerate(flushed):
            broker = self.brokers.get(self.slots[slot])
            rows = [] if broker is None else broker.store.read_messages(TOPIC, 0, start, offset)
            held = {m.offset for m in rows}
            missing = [o for o in range(start, offset) if o not in held]
            if missing:
                raise InvariantError(
                    f"slot {slot} claims flushed up to {offset}, but the database of "
                    f"{self.slots[slot]} lacks {len(missing)} of [{start}, {offset}) "
                    f"(first {missing[0]})"
                )


def _broker_id(address: str) -> BrokerId:
    return BrokerId(int(address.split(":")[0].lstrip("n")))
