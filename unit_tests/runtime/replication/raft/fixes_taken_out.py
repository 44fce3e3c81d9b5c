"""Code as it was before a fix (``RaftNode``'s, and re-replication's), for the tests that
show a seed finding the fault: each stands in for one method, patched in the test's
process (``monkeypatch``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pysyncobj.syncobj

from broker.partition.commands import MarkFlushed, ResetReplica
from broker.partition.log import Flushed, Rejected
from broker.partition.replica import PartitionReplica
from broker.persistence.flusher import Flusher
from manager.registry.brokers import BrokerRecord
from manager.registry.topics import PartitionRecord, PartitionState
from protocol.errors import ErrorCode, RaftQError
from protocol.types import BrokerId, RaftRole, ReplicaId, ReplicaSpec
from runtime.replication.raft.node import RaftNode


def changes_without_the_guard(
    self: RaftNode, address: str, *, add: bool, answered: Callable[[object], None]
) -> None:
    """``RaftNode.start_member_change`` before fc243fe: no one-change-at-a-time rule."""
    change = self.addNodeToCluster if add else self.removeNodeFromCluster
    change(address, lambda _result, error: answered(error))


STAMP_WINDOW_S = 3.0
"""How lately a member must have answered to count, as the leader's check did
(``raft_leader_fallback_timeout_s``'s default)."""


def replicas_by_stamps(self: RaftNode, index: int) -> int:
    """``RaftNode.replicas_holding`` as issue 19's item 3 found it counted before fc243fe:
    the members pysyncobj stamps as answered lately, whatever they hold (a new leader, and a
    leader adding a member, stamp every member "just now")."""
    if not self._isLeader():
        return 0
    answered: dict[Any, float] = self._SyncObj__lastResponseTime
    since = pysyncobj.syncobj.monotonicTime() - STAMP_WINDOW_S
    return 1 + sum(1 for n in self._SyncObj__otherNodes if answered.get(n, 0.0) >= since)


# --- re-replication, for the simulator's moves workload (``stress_tests/sim_moves.py``) --


def slot_to_move_before_fix(
    partition: PartitionRecord, gone: set[BrokerId], brokers: dict[BrokerId, BrokerRecord]
) -> int | None:
    """``manager.replica_mover._slot_to_move`` before fc243fe (issue 19, item 1): a move
    may start while a majority of the partition's brokers is alive, a draining one
    counting as alive, and the first gone broker in slot order goes first."""
    if partition.state is not PartitionState.ACTIVE or partition.moving is not None:
        return None
    alive = sum(1 for r in partition.replicas if brokers[r.broker_id].alive)
    if alive < len(partition.replicas) // 2 + 1:
        return None
    return next((r.replica_id for r in partition.replicas if r.broker_id in gone), None)


def replace_member_removing_first(
    self: PartitionReplica, slot: ReplicaId, leaving: str, leaving_alive: bool
) -> bool:
    """``replace_member`` before fc243fe (item 1): every member the spec does not name
    leaves first, live or dead; then the slot is reset (without the new replica's address:
    item 4) and the new replica added."""
    machine, spec = self._machine, self.spec
    if machine.status().role is not RaftRole.LEADER:
        raise RaftQError(ErrorCode.NOT_LEADER, f"{self.name} does not lead")
    for extra in sorted(machine.members() - frozenset(spec.partners)):
        machine.change_member(extra, add=False)
    added = spec.replicas[slot].raft_address
    if added not in machine.members():
        self._propose([ResetReplica(slot)])
        machine.change_member(added, add=True)
    return machine.members() == frozenset(spec.partners)


def reset_without_address(self: PartitionReplica, slot: ReplicaId, added: str) -> None:
    """``PartitionReplica._reset_slot`` before fc243fe (item 4): the reset does not
    record who holds the slot, so a flush mark from anyone moves it."""
    (reset,), _ = self._propose([ResetReplica(slot)])
    if isinstance(reset, Rejected):
        raise RaftQError(reset.code, f"{self.name}: {reset.message}")


def sync_when_behind_without_start(self: Flusher, spec: ReplicaSpec) -> None:
    """``Flusher._sync_when_behind`` before 974bcc0's follow-up (item 4, review G7): the
    mark carries the replica's flushed offset as its own view has it, without where the
    batch started or who flushed, so a view from before a reset claims rows the new
    replica's database lacks."""
    durable, end, flushed = self._replica.read(
        lambda log: (log.durable_end_offset, log.end_offset, log.flushed_offsets)
    )
    if durable < end:
        self._replica._submit(MarkFlushed(spec.replica_id, flushed[spec.replica_id]), Flushed)
