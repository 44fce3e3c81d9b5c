"""``PartitionReplica``: one partition replica as the broker's services use it.

Commands go through ``GroupCommit`` (concurrent callers share one Raft entry) to the
partition's ``PartitionMachine`` (Raft, or its in-memory twin in tests); each caller gets its
own typed result, and a rejection becomes a ``RaftQError``. Reads run a query on the applied
log through the machine, never holding its lock or its state. Re-replication's membership
steps (``replace_member``) are taken here, on the machine's members.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from broker.partition.applied import AppliedSignal
from broker.partition.commands import (
    Append,
    Command,
    Consume,
    DeadLettered,
    KeyValue,
    MarkFlushed,
    Receive,
    Redrive,
    ResetReplica,
    Settle,
    Truncate,
)
from broker.partition.group_commit import GroupCommit, GroupLimits
from broker.partition.group_leases import Leased, Redriven, Settled
from broker.partition.log import (
    Appended,
    Consumed,
    Flushed,
    PartitionLog,
    Rejected,
    Result,
    Truncated,
)
from broker.partition.raft import PartitionMachine
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.invariant import check
from protocol.limits import Limits
from protocol.types import Offset, RaftRole, ReplicaId, ReplicaSpec
from runtime.replication.machine import Entry, RaftStatus

T = TypeVar("T")
_Kind = TypeVar("_Kind")


class PartitionReplica:
    def __init__(self, spec: ReplicaSpec, machine: PartitionMachine, limits: Limits) -> None:
        self.spec = spec
        self._machine = machine
        # Two queues: an entry is synced or not as a whole, so ``replicated`` appends share
        # entries among themselves only (everything else is synced).
        self._group = GroupCommit(self._propose, group_limits(limits))
        self._unsynced_group = GroupCommit(
            lambda commands: self._propose(commands, synced=False), group_limits(limits)
        )
        self.applied = AppliedSignal()
        """Bumped after each command proposed here is applied (long polls, streams)."""

    @property
    def name(self) -> str:
        return self._machine.name

    def _propose(
        self, commands: Sequence[Command], synced: bool = True
    ) -> tuple[list[Result], Entry]:
        results, entry = self._machine.propose(commands, synced=synced)
        if len(results) != len(commands):
            raise RaftQError(ErrorCode.INTERNAL, f"{self.name}: a group applied as {results!r}")
        return results, entry

    def append(
        self,
        messages: Sequence[KeyValue],
        timestamp_ms: int,
        producer_id: str | None,
        sequence: int | None,
        deadline: Deadline | None = None,
        *,
        synced: bool = True,
    ) -> tuple[Appended, Entry]:
        """The batch's offsets and the entry that holds it (``synced=False``: the replicas
        need not sync it to disk before counting it)."""
        command = Append(tuple(messages), timestamp_ms, producer_id, sequence)
        group = self._group if synced else self._unsynced_group
        try:
            result, entry = group.submit(command, deadline)
        finally:
            self.applied.bump()  # also after a failure: it may have been applied
        return self._expect(command, result, Appended), entry

    def consume(
        self,
        consumer_id: str,
        max_messages: int,
        request_id: str | None,
        timestamp_ms: int,
        sequence: int | None = None,
        deadline: Deadline | None = None,
    ) -> Consumed:
        command = Consume(consumer_id, max_messages, request_id, timestamp_ms, sequence)
        return self._submit(command, Consumed, deadline)

    def mark_flushed(self, replica_id: ReplicaId, flushed_offset: Offset, start: Offset) -> Flushed:
        """This replica (``spec.raft_address``) has ``[start, flushed_offset)`` in its
        database, written on a view where its slot's flushed offset was ``start`` (see
        ``MarkFlushed``: a stale view or a slot that moved on changes nothing)."""
        command = MarkFlushed(replica_id, flushed_offset, start, self.spec.raft_address)
        return self._submit(command, Flushed)

    def receive(self, command: Receive, deadline: Deadline | None = None) -> Leased:
        """Lease messages to a member of a consumer group (issue 20)."""
        return self._submit(command, Leased, deadline)

    def settle(self, command: Settle | DeadLettered, deadline: Deadline | None = None) -> Settled:
        """Ack, nack or extend deliveries by receipt, or record dead letters."""
        return self._submit(command, Settled, deadline)

    def redrive(self, command: Redrive, deadline: Deadline | None = None) -> Redriven:
        """Make dead messages of a group deliverable again."""
        return self._submit(command, Redriven, deadline)

    def truncate(self, log_start_offset: Offset) -> Truncated:
        return self._submit(Truncate(log_start_offset), Truncated)

    def read(self, query: Callable[[PartitionLog], T]) -> T:
        return self._machine.read(query)

    def caught_up(self) -> bool:
        return self._machine.caught_up()

    def transfer_leadership(self, raft_address: str | None) -> None:
        self._machine.transfer_leadership(raft_address)

    def replicas_in_sync(self) -> int:
        """On the leader: itself and the members that answered an append of its term
        lately (``ReplicatedMachine.replicas_answering``); 0 on a follower."""
        return self._machine.replicas_answering()

    def replicas_holding(self, entry: Entry) -> int:
        return self._machine.replicas_holding(entry)

    def respec(self, spec: ReplicaSpec) -> None:
        """The partition's replicas changed (re-replication): ``spec`` names them now."""
        self.spec = spec

    def replace_member(self, slot: ReplicaId, leaving: str, leaving_alive: bool) -> bool:
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
           entry and has copied what left memory (its database holds the evicted range):
           removing it first would leave the group one failure (or, at replication
           factor 2, no failure at all) from a standstill while the new one catches up,
           and the leaving replica's database may be the only live copy of that range
           (a peer copies from it too: ``ReplicaSpec.leaving``).

        The new replica may be the leader itself (elected, or handed the lead, once a
        member): it is in the group and holds every entry, so steps 2 and 3 skip it.

        True when the members are ``spec``'s. Raises ``RaftQError`` (NOT_LEADER on a
        follower, or a Raft failure: retry)."""
        machine, spec = self._machine, self.spec
        if machine.status().role is not RaftRole.LEADER:
            raise RaftQError(ErrorCode.NOT_LEADER, f"{self.name} does not lead")
        wanted = frozenset(spec.partners)
        last = frozenset({leaving}) if leaving_alive else frozenset()
        for extra in sorted(machine.members() - wanted - last):
            machine.change_member(extra, add=False)
        added = spec.replicas[slot].raft_address
        leads = spec.replica_id == slot  # members() names the others only
        if not leads and added not in machine.members():
            self._reset_slot(slot, added)
            machine.change_member(added, add=True)
        if leaving in machine.members() and leaving_alive:
            commit_index = machine.status().commit_index
            if not leads and not machine.member_holds(added, commit_index):
                return False  # the new replica is still catching up: next round
            if self.read(lambda log: log.lagging(slot)):
                # It still copies what left memory, and the leaving replica may be the
                # only live one whose database holds it (simulator, moves workload).
                return False
            machine.change_member(leaving, add=False)
        return machine.members() == wanted

    def _reset_slot(self, slot: ReplicaId, added: str) -> None:
        # Not a member yet, so it has flushed nothing this group counts: a repeat of the
        # reset (a failure before the add) cannot undo a flush of its.
        (reset,), _ = self._propose([ResetReplica(slot, added)])
        if isinstance(reset, Rejected):  # the slot's old replica alone holds a range
            raise RaftQError(reset.code, f"{self.name}: {reset.message}")

    def status(self) -> RaftStatus:
        return self._machine.status()

    def close(self) -> None:
        self._machine.close()

    def discard(self) -> None:
        self._machine.discard()

    def _submit(
        self, command: Command, kind: type[_Kind], deadline: Deadline | None = None
    ) -> _Kind:
        try:
            result, _ = self._group.submit(command, deadline)
        finally:
            self.applied.bump()
        return self._expect(command, result, kind)

    def _expect(self, command: Command, result: Result, kind: type[_Kind]) -> _Kind:
        if isinstance(result, Rejected):
            raise RaftQError(result.code, f"{self.name}: {result.message}")
        if not isinstance(result, kind):  # the message is built only then: a repr of a
            # 1,000-message Append on every call showed up in the profile
            check(False, f"{command!r} was answered with {result!r}")
        return result  # type: ignore[return-value]


def group_limits(limits: Limits) -> GroupLimits:
    return GroupLimits(
        commands_max=limits.group_commit_commands_max,
        messages_max=limits.group_commit_messages_max,
        queued_max=limits.group_commit_queued_max,
        queue_wait_s_max=limits.group_commit_queue_wait_s_max,
        answer_wait_s_max=limits.raft_leader_wait_s_max + limits.http_timeout_s,
    )
