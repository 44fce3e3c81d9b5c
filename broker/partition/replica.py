"""``PartitionReplica``: one partition replica as the broker's services use it.

Commands go through ``GroupCommit`` (concurrent callers share one Raft entry) to a
``PartitionConsensus`` (Raft, or its in-memory twin in tests); each caller gets its own
typed result, and a rejection becomes a ``RaftQError``. Reads run a query on the applied
log through the consensus, never holding its lock or its state.
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
    Settle,
    Truncate,
)
from broker.partition.consensus import ConsensusStatus, Entry, PartitionConsensus
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
from protocol.deadline import Deadline
from protocol.errors import RaftQError
from protocol.invariant import check
from protocol.limits import Limits
from protocol.types import Offset, ReplicaId, ReplicaSpec

T = TypeVar("T")
_Kind = TypeVar("_Kind")


class PartitionReplica:
    def __init__(self, spec: ReplicaSpec, consensus: PartitionConsensus, limits: Limits) -> None:
        self.spec = spec
        self._consensus = consensus
        # Two queues: an entry is synced or not as a whole, so ``replicated`` appends share
        # entries among themselves only (everything else is synced).
        self._group = GroupCommit(consensus.propose, group_limits(limits))
        self._unsynced_group = GroupCommit(
            lambda commands: consensus.propose(commands, synced=False), group_limits(limits)
        )
        self.applied = AppliedSignal()
        """Bumped after each command proposed here is applied (long polls, streams)."""

    @property
    def name(self) -> str:
        return self._consensus.name

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
        return self._consensus.read(query)

    def caught_up(self) -> bool:
        return self._consensus.caught_up()

    def transfer_leadership(self, raft_address: str | None) -> None:
        self._consensus.transfer_leadership(raft_address)

    def replicas_in_sync(self) -> int:
        return self._consensus.replicas_in_sync()

    def replicas_holding(self, entry: Entry) -> int:
        return self._consensus.replicas_holding(entry)

    def respec(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        self._consensus.respec(spec)

    def replace_member(self, slot: ReplicaId, leaving: str, leaving_alive: bool) -> bool:
        return self._consensus.replace_member(self.spec, slot, leaving, leaving_alive)

    def status(self) -> ConsensusStatus:
        return self._consensus.status()

    def close(self) -> None:
        self._consensus.destroy()

    def discard(self) -> None:
        self._consensus.discard()

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
