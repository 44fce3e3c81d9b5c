"""``PartitionConsensus``: what the broker needs from a partition's replicated log.

Two implementations: ``PartitionRaft`` (pysyncobj, the real one) and ``MemoryConsensus``
(its in-memory twin: one replica that commits at once), so produce, pop, fetch and flush
logic is unit-tested and profiled in-process, without sockets or threads of its own.

Callers never take a lock or hold the ``PartitionLog``: ``read`` runs a query on it under
the implementation's lock and returns the query's (copied, plain) answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from broker.partition.commands import Command, ResetReplica, from_wire, to_wire
from broker.partition.log import PartitionLog, Rejected, Result
from protocol.errors import ErrorCode
from protocol.limits import PartitionLimits
from protocol.types import RaftRole, ReplicaId, ReplicaSpec

T = TypeVar("T")
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsensusStatus:
    role: RaftRole
    leader: str | None
    """Raft address of the group's leader, when known."""
    term: int
    commit_index: int
    last_applied: int
    has_quorum: bool
    partners: tuple[str, ...]
    log_entries: int

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role.value,
            "leader": self.leader,
            "term": self.term,
            "commit_index": self.commit_index,
            "last_applied": self.last_applied,
            "has_quorum": self.has_quorum,
            "partners": list(self.partners),
            "log_len": self.log_entries,
        }


@dataclass(frozen=True, slots=True)
class Entry:
    """Where a proposed group landed, for the acknowledgement: its Raft term and index, and
    how many replicas the leader knew to hold it on disk when it was applied here (0 for an
    entry proposed unsynced: ``replicated`` durability)."""

    term: int
    index: int
    replicas_synced: int


class PartitionConsensus(Protocol):
    @property
    def name(self) -> str: ...

    def propose(
        self, commands: Sequence[Command], *, synced: bool = True
    ) -> tuple[list[Result], Entry]:
        """Commit ``commands`` as one entry and apply it here; one result per command, and
        where the entry landed. ``synced=False``: the replicas need not sync the entry to
        disk before counting it (``replicated`` durability). Raises ``RaftQError`` when the
        entry as a whole failed."""

    def read(self, query: Callable[[PartitionLog], T]) -> T:
        """``query`` run on the log's current applied state, under the log's lock."""

    def caught_up(self) -> bool:
        """The applied state holds every committed entry (see ``RaftNode.caught_up``):
        reads of this replica's state are not stale."""

    def status(self) -> ConsensusStatus: ...

    def transfer_leadership(self, raft_address: str | None) -> None:
        """Ask this replica, if it leads, to hand leadership to the member at
        ``raft_address`` (Raft's TimeoutNow), or with ``None`` to the connected member that
        holds the most. Best effort and asynchronous: refused by the Raft layer unless that
        member has every entry; the new leader shows in ``status``."""

    def replicas_in_sync(self) -> int:
        """On the leader: the replicas, itself included, that answered it lately in its
        term (Kafka's in-sync replicas, for ``min_insync_replicas``); 0 on a follower."""

    def replicas_holding(self, entry: Entry) -> int:
        """On the leader: the replicas, itself included, known to hold the log up to
        ``entry`` (an acknowledgement of ``min_insync_replicas`` waits for that many); 0
        on a follower."""

    def respec(self, spec: ReplicaSpec) -> None:
        """The partition's replicas changed (re-replication): ``spec`` names them now."""

    def replace_member(
        self, spec: ReplicaSpec, slot: ReplicaId, leaving: str, leaving_alive: bool
    ) -> bool:
        """On the leader: make the group's members ``spec``'s, whose replica ``slot`` is
        new in place of the one at ``leaving`` (a dead leaving one is removed first, a
        live one last; the slot is reset to the new one before it is added; each step
        committed, a repeat resumes). True once the group's members are ``spec``'s. Raises
        ``RaftQError``: NOT_LEADER on a follower, or a Raft failure (retry)."""

    def destroy(self) -> None: ...

    def discard(self) -> None:
        """``destroy``, then delete this replica's Raft files: it is no longer one of the
        partition's replicas (moved away, or its topic rolled back)."""


def apply_group(log: PartitionLog, wire_commands: object, synced: bool = True) -> list[Result]:
    """Apply a committed group, command by command. Total: a malformed command becomes its
    own ``Rejected`` result, and the other commands of the group still apply. ``synced``:
    the entry was synced on a majority (so is everything before it)."""
    if not isinstance(wire_commands, list | tuple):
        return []
    results = [_total(log, wire) for wire in wire_commands]
    if synced:
        log.mark_durable()
    return results


def _total(log: PartitionLog, wire: object) -> Result:
    # An exception inside a pysyncobj apply wedges the group for good: a bug becomes a result.
    try:
        return log.apply(from_wire(wire))
    except Exception as exc:
        _log.exception("apply failed")
        return Rejected(ErrorCode.INTERNAL, f"apply failed: {exc}")


class MemoryConsensus:
    """A single in-memory replica that commits every proposal at once. Goes through the
    same wire form as Raft, so what it accepts a real group accepts too."""

    def __init__(self, name: str, replica_count: int, limits: PartitionLimits) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._log = PartitionLog(replica_count, limits)
        self._replica_count = replica_count
        self._entries = 0

    @property
    def name(self) -> str:
        return self._name

    def propose(
        self, commands: Sequence[Command], *, synced: bool = True
    ) -> tuple[list[Result], Entry]:
        wire = [to_wire(c) for c in commands]
        with self._lock:
            self._entries += 1
            return apply_group(self._log, wire, synced), Entry(1, self._entries, int(synced))

    def read(self, query: Callable[[PartitionLog], T]) -> T:
        with self._lock:
            return query(self._log)

    def caught_up(self) -> bool:
        return True

    def status(self) -> ConsensusStatus:
        with self._lock:
            entries = self._entries
        return ConsensusStatus(RaftRole.LEADER, self._name, 1, entries, entries, True, (), entries)

    def transfer_leadership(self, raft_address: str | None) -> None:
        pass  # one replica: it always leads

    def replicas_in_sync(self) -> int:
        return self._replica_count  # it stands for a healthy group

    def replicas_holding(self, entry: Entry) -> int:
        return self._replica_count

    def respec(self, spec: ReplicaSpec) -> None:
        pass  # no peers to talk to

    def replace_member(
        self, spec: ReplicaSpec, slot: ReplicaId, leaving: str, leaving_alive: bool
    ) -> bool:
        """Only the log's side: the new replica's slot starts again from 0."""
        self.propose([ResetReplica(slot, spec.replicas[slot].raft_address)])
        return True

    def destroy(self) -> None:
        pass

    def discard(self) -> None:
        pass
