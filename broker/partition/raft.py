"""``PartitionRaft``: adapts one ``PartitionLog`` to a pysyncobj Raft group.

The only broker module that imports pysyncobj. It owns the ``SyncObj`` (one per hosted
replica, one TCP port each) and turns pysyncobj's failures into ``RaftQError``s.

Implements ``PartitionConsensus``. Threads: pysyncobj's tick thread applies committed
entries; the group-commit proposer (an HTTP or flusher thread) calls ``propose``, which
blocks until the entry is applied locally, bounded by ``raft_leader_wait_s_max`` plus
``raft_commit_timeout_s``; any thread calls ``read``, which runs under the state's lock.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

from pysyncobj import SyncObjConsumer, replicated
from pysyncobj.syncobj import SyncObjException

from broker.partition.commands import Command, KeyValue, ResetReplica, to_wire
from broker.partition.consensus import ConsensusStatus, Entry, apply_group
from broker.partition.log import MessageTuple, PartitionLog, Rejected, Result
from protocol.durable_files import fsync_directory, make_directories
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits, PartitionLimits
from protocol.types import ReplicaId, ReplicaSpec
from runtime.replication.raft import journal as durable_journal
from runtime.replication.raft.dump import FrozenState
from runtime.replication.raft.node import RaftNode, raft_conf, raft_failure

_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GroupApplied:
    """What applying a group returns to its proposer (on this node only: never stored)."""

    results: list[Result]
    index: int
    term: int


class ReplicatedPartition(SyncObjConsumer):
    """The replicated commands of a partition: this list is a wire protocol.

    pysyncobj numbers @replicated methods by their sorted names, so adding or renaming one
    changes the protocol of every node. Versions start at 0: pysyncobj enables a method of
    ``ver=N`` only once the leader has switched the whole group to code version N, so a changed
    command is a new ``ver=N+1`` beside the old one, never an edit of it.

    ``run_group`` (one committed entry holding a group of commands, see
    ``broker.partition.commands``) and ``run_group_unsynced`` (the same, for appends with
    ``replicated`` durability: its entries are not synced when a journal takes them; the
    name sorts after every other, so adding it renumbered nothing) are the commands proposed
    today. ``append``,
    ``consume`` and ``mark_flushed`` are the single commands proposed before group commit;
    they stay, unchanged, so journals written then still replay (and their numbers: the
    name ``run_group`` sorts after them, so adding it renumbered nothing).

    Attributes set before ``super().__init__()`` (the lock) are not part of snapshots;
    ``log`` (set after) is.
    """

    def __init__(
        self, replica_count: int, limits: PartitionLimits, snapshot_chunk_messages: int
    ) -> None:
        self.lock = threading.Lock()
        self.snapshot_chunk_messages = snapshot_chunk_messages
        super().__init__()
        self.log = PartitionLog(replica_count, limits)

    def _serialize(self) -> dict[str, object]:
        """Tick thread, at a log compaction: the state for the full dump, as a frozen copy
        that the dump writer's thread pickles (pysyncobj would pickle the live log)."""
        with self.lock:  # as apply: no thread may see the log half changed
            state: dict[str, object] = super()._serialize()
            state["log"] = FrozenPartitionLog(self.log, self.snapshot_chunk_messages)
        return state

    @replicated(ver=0)
    def run_group(self, commands: list[tuple[object, ...]]) -> GroupApplied:
        return self._apply(commands, synced=True)

    @replicated(ver=0)
    def run_group_unsynced(self, commands: list[tuple[object, ...]]) -> GroupApplied:
        return self._apply(commands, synced=False)

    def _apply(self, commands: list[tuple[object, ...]], *, synced: bool) -> GroupApplied:
        """The results, and the index and term of the entry (read while it is applied)."""
        node = self._syncObj
        index, term = node.applying_entry() if isinstance(node, RaftNode) else (0, 0)
        with self.lock:
            return GroupApplied(apply_group(self.log, commands, synced), index, term)

    # --- legacy single commands: replayed from old journals, never proposed ---------------

    @replicated(ver=0)
    def append(
        self,
        messages: list[KeyValue],
        timestamp_ms: int,
        producer_id: str | None,
        sequence: int | None,
    ) -> object:
        with self.lock:
            return apply_group(
                self.log, [("append", messages, timestamp_ms, producer_id, sequence)]
            )

    @replicated(ver=0)
    def consume(self, consumer_id: str, max_messages: int, request_id: str | None) -> object:
        with self.lock:
            return apply_group(self.log, [("consume", consumer_id, max_messages, request_id)])

    @replicated(ver=0)
    def mark_flushed(self, replica_id: int, flushed_offset: int) -> object:
        with self.lock:
            return apply_group(self.log, [("mark_flushed", replica_id, flushed_offset)])


class PartitionRaft:
    """One replica's Raft node. Created in the serving process, never before a fork."""

    def __init__(self, spec: ReplicaSpec, data_dir: str, secret: str, limits: Limits) -> None:
        self.spec = spec
        self._limits = limits
        self.state = ReplicatedPartition(
            len(spec.replicas),
            # The manager's, recorded with the topic; a replica created before the manager
            # sent them keeps its broker's own (as it always did).
            spec.limits or limits.partition_limits(),
            limits.raft_snapshot_chunk_messages,
        )
        self._data_dir = data_dir
        make_directories(data_dir)  # durable: the journal and dump inside must be found
        conf = raft_conf(
            limits,
            secret=secret,
            bind_address=spec.raft_address,
            journal_file=os.path.join(data_dir, "raft.journal"),
            dump_file=os.path.join(data_dir, "raft.dump"),
            membership_changes=True,  # re-replication replaces a dead replica
        )
        durable_journal.install()
        self._sync = RaftNode(
            spec.raft_address,
            list(spec.partners),
            conf,
            consumers=[self.state],
            commit_notice_delay_s=limits.raft_commit_notice_delay_s,
        )
        self._sync.leave_unsynced(self.state, "run_group_unsynced")
        self._sync.addOnTickCallback(self._compact_when_large)

    def _compact_when_large(self) -> None:
        """Tick thread: bound the memory the Raft log holds by bytes (see the limit)."""
        journal = self._sync.journal
        if (
            journal is not None
            and journal.entry_bytes >= self._limits.raft_log_compaction_bytes_min
        ):
            self._sync.forceLogCompaction()

    def transfer_leadership(self, raft_address: str | None) -> None:
        self._sync.transfer_leadership(raft_address)

    def propose(
        self, commands: Sequence[Command], *, synced: bool = True
    ) -> tuple[list[Result], Entry]:
        """Commit ``commands`` as one entry and wait until it is applied here."""
        self._sync.wait_for_leader(self._limits.raft_leader_wait_s_max, self.name)
        wire = [to_wire(command) for command in commands]
        run = self.state.run_group if synced else self.state.run_group_unsynced
        try:
            applied = run(wire, sync=True, timeout=self._limits.raft_commit_timeout_s)
        except SyncObjException as exc:
            timeout_s = self._limits.raft_commit_timeout_s
            raise raft_failure(exc.errorCode, self.name, timeout_s) from exc
        if not (isinstance(applied, GroupApplied) and len(applied.results) == len(commands)):
            raise RaftQError(ErrorCode.INTERNAL, f"{self.name}: a group applied as {applied!r}")
        # Every replica that acknowledged a synced entry synced it first, and a committed
        # entry was acknowledged by a majority; the leader may know of more. (A follower
        # proposes too: pysyncobj forwards its command to the leader.)
        majority = len(self.spec.replicas) // 2 + 1
        synced_count = max(majority, self._sync.replicas_holding(applied.index)) if synced else 0
        return applied.results, Entry(applied.term, applied.index, synced_count)

    def replicas_in_sync(self) -> int:
        """On the leader: itself and the members that answered an append of its term,
        the last time within ``raft_leader_fallback_timeout_s`` (after which pysyncobj's
        leader would count the quorum lost too); 0 on a follower."""
        return self._sync.replicas_answering(self._limits.raft_leader_fallback_timeout_s)

    def replicas_holding(self, entry: Entry) -> int:
        if entry.term != self._sync.node_status().term:
            return 0  # led in another term: what the match indexes say is not about it
        return self._sync.replicas_holding(entry.index)

    def respec(self, spec: ReplicaSpec) -> None:
        self.spec = spec

    def replace_member(
        self, spec: ReplicaSpec, slot: ReplicaId, leaving: str, leaving_alive: bool
    ) -> bool:
        """On the leader: make the group's members those of ``spec``, whose replica
        ``slot`` is new in place of the one at ``leaving`` (or, for a re-targeted move, of
        a new replica that never caught up), one step at a time, each committed before the
        next and skipped when already done, so a repeat resumes where a failure left off.
        The new replica is hosted before this is asked, so it answers once added.

        1. Members ``spec`` does not name go first, unless it is the live leaving one: a
           dead member must never count toward a majority of a larger group.
        2. The slot is reset to the new replica (``ResetReplica``: its flushed offset is
           0 and only that replica's flush marks count for it), then it is added.
        3. A live leaving member leaves last, once the new one holds every committed
           entry: removing it first would leave the group one failure (or, at replication
           factor 2, no failure at all) from a standstill while the new one catches up.

        The new replica may be the leader itself (elected, or handed the lead, once a
        member): it is in the group and holds every entry, so steps 2 and 3 skip it.

        True when the members are ``spec``'s. Raises ``RaftQError`` (NOT_LEADER on a
        follower, or a Raft failure: retry)."""
        if not self._sync._isLeader():
            raise RaftQError(ErrorCode.NOT_LEADER, f"{self.name} does not lead")
        timeout_s = self._limits.raft_commit_timeout_s
        wanted = frozenset(spec.partners)
        last = frozenset({leaving}) if leaving_alive else frozenset()
        for extra in sorted(self._sync.members() - wanted - last):
            self._sync.change_member(extra, add=False, timeout_s=timeout_s)
        added = spec.replicas[slot].raft_address
        leads = spec.replica_id == slot  # members() names the others only
        if not leads and added not in self._sync.members():
            # Not a member yet, so it has flushed nothing this group counts: a repeat of
            # the reset (a failure before the add) cannot undo a flush of its.
            (reset,), _ = self.propose([ResetReplica(slot, added)])
            if isinstance(reset, Rejected):  # the slot's old replica alone holds a range
                raise RaftQError(reset.code, f"{self.name}: {reset.message}")
            self._sync.change_member(added, add=True, timeout_s=timeout_s)
        if leaving in self._sync.members() and leaving_alive:
            commit_index = self._sync.node_status().commit_index
            if not leads and not self._sync.member_holds(added, commit_index):
                return False  # the new replica is still catching up: next round
            self._sync.change_member(leaving, add=False, timeout_s=timeout_s)
        return self._sync.members() == wanted

    def read(self, query: Callable[[PartitionLog], T]) -> T:
        with self.state.lock:
            return query(self.state.log)

    def caught_up(self) -> bool:
        return self._sync.caught_up()

    @property
    def name(self) -> str:
        return f"{self.spec.topic}/{self.spec.partition_id} replica {self.spec.replica_id}"

    def status(self) -> ConsensusStatus:
        node = self._sync.node_status()
        return ConsensusStatus(
            role=node.role,
            leader=node.leader,
            term=node.term,
            commit_index=node.commit_index,
            last_applied=node.last_applied,
            has_quorum=node.has_quorum,
            partners=tuple(sorted(self._sync.members())),
            log_entries=node.log_entries,
        )

    def destroy(self) -> None:
        self._sync.destroy()

    def discard(self) -> None:
        # The tick thread must have closed the journal before its folder goes.
        self._sync.close(self._limits.http_shutdown_grace_s)
        shutil.rmtree(self._data_dir, ignore_errors=True)
        fsync_directory(os.path.dirname(self._data_dir))


class FrozenPartitionLog(FrozenState):
    """A ``PartitionLog`` as it was at a log compaction, for the full dump.

    Taken in the tick thread, so it must be cheap whatever the backlog: the message dict is
    copied (its values are immutable tuples: ~17 ms at 500k messages) and the other
    attributes (bounded: offsets, producers, consumers) are pickled. The dump writer's
    thread then pickles the messages ``chunk_messages`` at a time (one GIL hold each; one
    pickle call over all of them held it for ~0.4 s at 500k). Unpickles into a
    ``PartitionLog`` equal to the original, attribute order included.
    """

    def __init__(self, log: PartitionLog, chunk_messages: int) -> None:
        attributes = dict(vars(log))
        self._messages = dict(attributes["messages"])
        attributes["messages"] = None  # keeps its place in the attribute order
        self._attributes = pickle.dumps(attributes, protocol=pickle.HIGHEST_PROTOCOL)
        self._chunk_messages = chunk_messages

    def __reduce__(self) -> tuple[object, tuple[bytes, list[bytes]]]:
        items = iter(self._messages.items())
        chunks: list[bytes] = []
        while chunk := list(islice(items, self._chunk_messages)):
            chunks.append(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL))
        return (thaw_partition_log, (self._attributes, chunks))


def thaw_partition_log(attributes: bytes, chunks: list[bytes]) -> PartitionLog:
    """Loads a ``FrozenPartitionLog`` from a full dump (its name is part of the dump
    format); goes through ``PartitionLog.__setstate__`` as unpickling a log does."""
    state: dict[str, object] = pickle.loads(attributes)
    messages: dict[int, MessageTuple] = {}
    for chunk in chunks:
        messages.update(pickle.loads(chunk))
    state["messages"] = messages
    log = PartitionLog.__new__(PartitionLog)
    log.__setstate__(state)
    return log
