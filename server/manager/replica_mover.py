"""``ReplicaMover``: re-replication, run by the manager leader's duties.

When a broker has been silent for ``broker_replace_after_s``, or is draining (``raftq
broker remove``), each replica it holds moves to a live broker, ``replica_moves_max``
partitions at a time (a move stalled for ``replica_move_stall_s`` stops counting), as a
recorded multi-step operation that a new manager leader resumes from the registry:

1. ``BeginMove`` (replicated): the partition's replica slot names the new broker and Raft
   address; the old placement is kept as ``moving.removed``.
2. A leaving replica that leads (a draining broker's) hands leadership to another live,
   caught-up replica first (a member cannot remove itself).
3. The new broker hosts the replica (``POST /partitions``) before it joins the group, so
   it answers once added: a member that does not run would count toward the majority.
4. Every live replica's broker gets the new spec (``POST /partitions/members``, kept for
   its restarts); the partition's Raft leader changes the members one committed step at
   a time (``PartitionReplica.replace_member``): a dead leaving member is removed first, the
   slot is reset to the new replica, the new replica is added, and a live leaving member
   (a drain) is removed last, once the new replica holds every committed entry.
5. ``FinishMove`` (replicated), once the group's members are the new ones and the new
   replica reports ``caught_up`` and has flushed at least up to the evicted offset (what
   only databases hold) and as far as the slowest other replica.

Every step is idempotent, so each reconcile round simply repeats the unfinished ones. A
partition moves only while a majority of its replicas is alive (a membership change needs
a commit); a dead replica moves before a draining one, and a draining one only while every
other replica is alive (it leaves last, so the group never has fewer live members than
before). A replication-factor-1 replica never moves (a drain of one is refused). Thread:
the leader-duties thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from manager.broker_client import BrokerClient
from manager.broker_monitor import BrokerMonitor
from manager.placement import place_replacement
from manager.raft import RegistryMachine
from manager.registry import commands
from manager.registry.brokers import BrokerRecord
from manager.registry.topics import PartitionRecord, PartitionState, TopicRecord
from manager.services import check_outcome, replica_specs
from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.types import BrokerId, PartitionId

_log = logging.getLogger(__name__)


class ReplicaMover:
    def __init__(
        self,
        limits: Limits,
        raft: RegistryMachine,
        brokers: BrokerClient,
        monitor: BrokerMonitor,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = limits
        self._clock_s = clock_s
        self._raft = raft
        self._brokers = brokers
        self._monitor = monitor
        self._seen_moving_s: dict[tuple[str, PartitionId], float] = {}
        """When this leader first saw each unfinished move (for ``replica_move_stall_s``)."""
        self._handoffs = 0
        """Rounds of leadership hand-off asked so far: each asks the next candidate."""
        self._stalled_logged = 0
        """The count of stalled moves last logged."""

    def tick(self) -> None:
        self._drop_strays()
        topics, brokers = self._raft.read(
            lambda s: (s.topics.all(), {b.broker_id: b for b in s.brokers.all()})
        )
        moving = [(t, p) for t in topics for p in t.moving]
        now_s = time.monotonic()
        gone = self._monitor.gone(brokers.values(), self._limits.broker_replace_after_s, now_s)
        for topic, partition in moving:
            try:
                if not self._retarget(topic, partition, brokers, gone):
                    self._advance(topic, partition, brokers)
            except RaftQError as exc:
                _log.warning(
                    "moving %s/%s: %s (retried)", topic.name, partition.partition_id, exc.message
                )
        moves_max = self._moves_max(moving, self._clock_s())
        if len(moving) < moves_max:
            self._begin_next(topics, brokers, gone, moves_max)

    def _moves_max(self, moving: list[tuple[TopicRecord, PartitionRecord]], now_s: float) -> int:
        """``replica_moves_max``, plus one per move stalled for ``replica_move_stall_s``
        (at most ``replica_moves_stalled_max``)."""
        keys = [(t.name, p.partition_id) for t, p in moving]
        self._seen_moving_s = {key: self._seen_moving_s.get(key, now_s) for key in keys}
        stall_s = self._limits.replica_move_stall_s
        stalled = sum(1 for since_s in self._seen_moving_s.values() if now_s - since_s >= stall_s)
        if stalled != self._stalled_logged:  # once per change, not every round
            _log.warning("%s replica move(s) stalled for %s s or more", stalled, stall_s)
            self._stalled_logged = stalled
        return self._limits.replica_moves_max + min(stalled, self._limits.replica_moves_stalled_max)

    def _drop_strays(self) -> None:
        """Tell brokers to drop the replicas they report that no partition has (moved
        away while their broker was down). The reports are read before the registry: a
        replica is recorded before any broker hosts it, so one that is reported and not
        recorded is not one still being created."""
        hosted = self._monitor.hosted()
        placed, addresses = self._raft.read(
            lambda s: (
                {
                    (r.broker_id, t.name, p.partition_id, r.raft_address)
                    for t in s.topics.all()
                    for p in t.partitions
                    # A leaving replica stays until it has left the group.
                    for r in (*p.replicas, *([p.moving.removed] if p.moving else []))
                },
                {b.broker_id: b.address for b in s.brokers.all()},
            )
        )
        for broker_id, topic, partition_id, raft_address in hosted:
            if (broker_id, topic, partition_id, raft_address) in placed:
                continue
            address = addresses.get(broker_id)
            if address is None:
                continue
            try:
                if self._brokers.drop_replica(address, topic, partition_id, raft_address):
                    _log.warning(
                        "broker %s dropped its replica of %s/%s (%s): no longer one of the "
                        "partition's",
                        broker_id,
                        topic,
                        partition_id,
                        raft_address,
                    )
            except RaftQError as exc:
                _log.warning("broker %s keeps a stray replica: %s", broker_id, exc.message)

    def _begin_next(
        self,
        topics: list[TopicRecord],
        brokers: dict[BrokerId, BrokerRecord],
        gone: set[BrokerId],
        moves_max: int,
    ) -> None:
        if not gone:
            return
        for topic in topics:
            for partition in topic.partitions:
                slot = _slot_to_move(partition, gone, brokers)
                if slot is not None and self._begin(topic, partition, slot, brokers, moves_max):
                    return

    def _retarget(
        self,
        topic: TopicRecord,
        partition: PartitionRecord,
        brokers: dict[BrokerId, BrokerRecord],
        gone: set[BrokerId],
    ) -> bool:
        """A move whose new broker is gone before the move finished goes elsewhere (the
        partition leader then removes the abandoned member too). True when re-targeted."""
        move = partition.moving
        if move is None or partition.replicas[move.replica_id].broker_id not in gone:
            return False
        abandoned = partition.replicas[move.replica_id].broker_id
        placed = self._place(topic, partition, brokers, leaving=move.removed.broker_id)
        if placed is None:
            return True
        to_broker, address = placed
        command = commands.RetargetMove(
            topic.name, partition.partition_id, abandoned, to_broker, address
        )
        check_outcome(self._raft.propose(command), f"moving {topic.name}")
        _log.warning(
            "moving replica %s of %s/%s to broker %s (%s) instead: broker %s is gone",
            move.replica_id,
            topic.name,
            partition.partition_id,
            to_broker,
            address,
            abandoned,
        )
        return True

    def _place(
        self,
        topic: TopicRecord,
        partition: PartitionRecord,
        brokers: dict[BrokerId, BrokerRecord],
        leaving: BrokerId | None = None,
    ) -> tuple[BrokerId, str] | None:
        """Where the moving slot goes: a broker alive and not draining (so not gone) that
        holds no replica of the partition, nor the ``leaving`` one; ``None`` (logged)
        when there is none yet."""
        counts, ports = self._raft.read(
            lambda s: (s.topics.replica_count_by_broker(), s.topics.raft_ports_by_host())
        )
        holders = [r.broker_id for r in partition.replicas]
        holders += [] if leaving is None else [leaving]
        try:
            return place_replacement(holders, brokers.values(), counts, ports)
        except RaftQError as exc:
            _log.warning("cannot move %s/%s yet: %s", topic.name, partition.partition_id, exc)
            return None

    def _begin(
        self,
        topic: TopicRecord,
        partition: PartitionRecord,
        slot: int,
        brokers: dict[BrokerId, BrokerRecord],
        moves_max: int,
    ) -> bool:
        """True when the move began (else the next partition may)."""
        placed = self._place(topic, partition, brokers)
        if placed is None:
            return False
        to_broker, address = placed
        command = commands.BeginMove(
            topic.name,
            partition.partition_id,
            slot,
            to_broker,
            address,
            moves_max,
        )
        try:
            check_outcome(self._raft.propose(command), f"moving {topic.name}")
        except RaftQError as exc:
            _log.warning("not moving %s/%s: %s", topic.name, partition.partition_id, exc.message)
            return False
        _log.warning(
            "moving replica %s of %s/%s from %s broker %s to broker %s (%s)",
            slot,
            topic.name,
            partition.partition_id,
            "draining" if brokers[partition.replicas[slot].broker_id].draining else "dead",
            partition.replicas[slot].broker_id,
            to_broker,
            address,
        )
        return True

    def _advance(
        self, topic: TopicRecord, partition: PartitionRecord, brokers: dict[BrokerId, BrokerRecord]
    ) -> None:
        move = partition.moving
        if move is None or self._lead_elsewhere(topic, partition, brokers):
            return
        leaving = brokers.get(move.removed.broker_id)
        leaving_alive = leaving is not None and leaving.alive
        specs = replica_specs(topic, partition, brokers)
        new_address, new_spec = specs[move.replica_id]
        self._brokers.host_replica(new_address, new_spec)
        members_match = True
        led = False
        for address, spec in specs:
            # The new replica too: once it is a member it may lead (an election, or the
            # leader balance preferring it), and only the leader answers for the group. It
            # was skipped, and a move whose new replica led waited for good (long tier,
            # membership seed 61637).
            replica = partition.replicas[spec.replica_id]
            if not brokers[replica.broker_id].alive:
                continue
            try:
                answer = self._brokers.replace_member(
                    address, spec, move.replica_id, move.removed.raft_address, leaving_alive
                )
            except RaftQError as exc:  # one member's failure must not keep the leader unasked
                _log.warning("moving %s/%s: %s", topic.name, partition.partition_id, exc.message)
                continue
            if answer.get("leader") is True:
                led = True
                members_match = answer.get("members_match") is True
        if not (led and members_match):
            return  # no leader answered yet (an election), or a step is to come: next round
        if self._caught_up(topic.name, partition, move.replica_id):
            done = self._raft.propose(commands.FinishMove(topic.name, partition.partition_id))
            check_outcome(done, f"moving {topic.name}")
            _log.warning(
                "moved replica %s of %s/%s to broker %s",
                move.replica_id,
                topic.name,
                partition.partition_id,
                partition.replicas[move.replica_id].broker_id,
            )

    def _lead_elsewhere(
        self, topic: TopicRecord, partition: PartitionRecord, brokers: dict[BrokerId, BrokerRecord]
    ) -> bool:
        """A member cannot remove itself, so a leaving replica that leads (a draining
        broker's: it is alive) first hands leadership to another replica: one whose broker
        is alive and whose last report says it is caught up, a different one each round
        (the Raft layer refuses a target that lacks an entry, and one target that never
        catches up must not stall the move). True while it may still lead (asked now, or
        no candidate yet; the next round sees)."""
        move = partition.moving
        if move is None:
            return False
        leaving = brokers.get(move.removed.broker_id)
        pid = partition.partition_id
        if leaving is None or self._monitor.leader_of(topic.name, pid) != leaving.broker_id:
            return False
        reports = self._monitor.replica_reports(topic.name, pid)
        candidates = [
            r
            for r in partition.replicas
            if r.replica_id != move.replica_id
            and brokers[r.broker_id].alive
            and reports.get(r.broker_id, {}).get("caught_up") is True
        ]
        if not candidates:
            _log.warning("%s/%s: no live, caught-up replica to hand leadership to", topic.name, pid)
            return True
        target = candidates[self._handoffs % len(candidates)]
        self._handoffs += 1
        self._brokers.transfer_leadership(leaving.address, topic.name, pid, target.raft_address)
        _log.info("asked broker %s to hand %s/%s to %s", leaving.broker_id, topic.name, pid, target)
        return True

    def _caught_up(self, topic: str, partition: PartitionRecord, slot: int) -> bool:
        """The new replica's last report: it has applied every committed entry, and its
        database holds what only databases hold (below the evicted offset) and at least
        what the slowest other replica's does, so no range is left on one database."""
        new = partition.replicas[slot]
        reports = self._monitor.replica_reports(topic, partition.partition_id)
        report = reports.get(new.broker_id)
        if report is None or report.get("caught_up") is not True:
            return False
        if report.get("raft_address") != new.raft_address:
            return False
        flushed = report.get("flushed_offsets")
        if not isinstance(flushed, list) or len(flushed) != len(partition.replicas):
            return False
        evicted = [r.get("evicted_offset") for r in reports.values()]
        evicted_max = max((e for e in evicted if isinstance(e, int)), default=0)
        others = [f for index, f in enumerate(flushed) if index != slot]
        return flushed[slot] >= evicted_max and (not others or flushed[slot] >= min(others))


def _slot_to_move(
    partition: PartitionRecord, gone: set[BrokerId], brokers: dict[BrokerId, BrokerRecord]
) -> int | None:
    """The replica slot of ``partition`` to move off a gone broker, if it can move now: the
    partition is ACTIVE and not moving, has more than one replica, and a majority of its
    replicas is alive (a membership change needs a commit). A dead replica goes first
    (removing it keeps a majority of live members); a live leaving one (a drain) only
    while every other replica is alive, since it leaves the group last."""
    if partition.state is not PartitionState.ACTIVE or partition.moving is not None:
        return None
    if len(partition.replicas) < 2:
        return None  # refused at the drain: a lone replica cannot hand over
    alive = [r for r in partition.replicas if brokers[r.broker_id].alive]
    if len(alive) < len(partition.replicas) // 2 + 1:
        return None
    leaving = [r for r in partition.replicas if r.broker_id in gone]
    dead = [r for r in leaving if not brokers[r.broker_id].alive]
    if dead:
        return dead[0].replica_id
    if leaving and len(alive) == len(partition.replicas):
        return leaving[0].replica_id
    return None
