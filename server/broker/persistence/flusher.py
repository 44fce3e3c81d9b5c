"""``Flusher``: writes one replica's committed messages into its own database.

No thread of its own: one round is one call of ``run_round``, made by the broker's flush
pool (``broker.persistence.flush_pool.FlushPool``: ``flush_threads`` threads per broker
process serving every hosted replica, never two rounds of one replica at once), which waits
the pause ``run_round`` returns before this replica's next round. Each round reads up to
``flush_batch_messages_max`` messages past this replica's flushed offset from ``msg_dict``,
inserts them in one transaction (idempotent: the primary key skips rows already there, so a
crash between the insert and the Raft command only repeats work), then proposes
``mark_flushed``. A round that was not full is followed by a pause of ``flush_period_s``
(doubling after each failed round, up to ``flush_retry_backoff_s_max``): flushing goes at
its own pace, in batches, rather than once per produced message (each round costs a
database transaction and a Raft command on every replica). Once every in-sync replica has
flushed a message it leaves ``msg_dict``; a replica that lagged too far copies what left
memory from a peer (``PeerRead``).

Retention runs here too, in the same round: every replica deletes the rows below the
partition's log start from its database, and a replica that has not flushed up to it skips
what left (its peers no longer have it); the leader's replica, every
``retention_check_period_s``, asks its database where the topic's retention puts the log
start and proposes ``truncate`` when that moved.

Every flush mark carries where the batch started and this replica's Raft address
(``MarkFlushed``), so a mark made on a stale view, or by a replica whose slot moved to
another, never claims rows its database lacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.partition.log import PartitionLog
from broker.partition.replica import PartitionReplica
from broker.persistence.store import FlushBatch, MessageStore
from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.types import Offset, RaftRole, ReplicaSpec, StoredMessage

PeerRead = Callable[[ReplicaSpec, int, int], list[StoredMessage]]
"""Messages ``[start, end)`` of a partition from a peer replica (may return fewer)."""

_log = logging.getLogger(__name__)


class Flusher:
    def __init__(
        self,
        replica: PartitionReplica,
        store: MessageStore,
        limits: Limits,
        peer_read: PeerRead,
    ) -> None:
        self._replica = replica
        self._store = store
        self._peer_read = peer_read
        self._limits = limits
        self._deleted_below = 0
        """Rows below it are gone from this replica's database (0 after a restart: the
        first round deletes again, which is idempotent)."""
        self._retention_due_s = 0.0
        self._partition_seen: tuple[int, float] = (0, 0.0)
        """The partition time last read, and this host's monotonic time when it was first
        read at that value (``_partition_now_ms``)."""
        self._backoff_s = limits.flush_period_s
        """The pause after a round that was not full: ``flush_period_s``, doubled after
        each failed round up to ``flush_retry_backoff_s_max``."""

    @property
    def name(self) -> str:
        return self._replica.name

    def run_round(self) -> float:
        """One round (``flush_once``; a failure is logged, not raised: the database or Raft
        may be down, and the next round retries); return how long to pause before the next
        one: 0 after a full batch (more may wait), else ``_backoff_s``."""
        try:
            flushed = self.flush_once()
            self._backoff_s = self._limits.flush_period_s
        except (RaftQError, Exception) as exc:  # the DB or Raft may be down: retry later
            _log.warning("%s: flush failed: %s", self._replica.name, exc)
            flushed = 0
            self._backoff_s = min(self._backoff_s * 2, self._limits.flush_retry_backoff_s_max)
        if flushed < self._limits.flush_batch_messages_max:
            return self._backoff_s
        return 0.0

    def flush_once(self) -> int:
        """Apply retention, then flush one bounded batch; return how many messages it
        wrote."""
        spec = self._replica.spec
        self._retain(spec)
        rows, start, end = self._next_rows(spec)
        if not rows:
            self._sync_when_behind(spec)
            return 0
        self._store.insert_messages(spec.topic, spec.partition_id, rows, end)
        self._replica.mark_flushed(spec.replica_id, Offset(end), Offset(start))
        return len(rows)

    def _retain(self, spec: ReplicaSpec) -> None:
        log_start, flushed, partition_ms = self._replica.read(
            lambda log: (log.log_start_offset, log.flushed_offsets[spec.replica_id], log.clock_ms)
        )
        if flushed < log_start:  # what it lacks has left every peer: nothing to copy
            # ``start``: only if the slot is still where this view saw it (not reset since).
            self._replica.mark_flushed(spec.replica_id, log_start, Offset(flushed))
        if log_start > self._deleted_below:
            self._store.delete_below(spec.topic, spec.partition_id, log_start)
            self._deleted_below = log_start
        limits = spec.limits
        now_s = time.monotonic()
        partition_now_ms = self._partition_now_ms(partition_ms, now_s)
        if limits is None or not (limits.retention_ms or limits.retention_bytes):
            return
        if now_s < self._retention_due_s or self._replica.status().role is not RaftRole.LEADER:
            return
        self._retention_due_s = now_s + self._limits.retention_check_period_s
        cutoff_ms = _age_cutoff_ms(partition_now_ms, limits.retention_ms)
        start = self._store.retention_start(
            spec.topic,
            spec.partition_id,
            max(flushed, log_start),
            cutoff_ms,
            limits.retention_bytes or None,
        )
        if start > log_start:
            self._replica.truncate(Offset(start))

    def _partition_now_ms(self, partition_ms: int, now_s: float) -> int:
        """Partition time moved on by the time this host has seen pass since it first read
        that value (on its monotonic clock): an idle partition still ages, and the estimate
        never runs ahead of partition time plus the real time elapsed, whatever this host's
        wall clock says (a new leader starts from 0 elapsed: later, never earlier)."""
        seen_ms, seen_s = self._partition_seen
        if partition_ms != seen_ms:
            self._partition_seen = (partition_ms, now_s)
            return partition_ms
        return partition_ms + int((now_s - seen_s) * 1000)

    def _sync_when_behind(self, spec: ReplicaSpec) -> None:
        """``replicated`` appends are committed but not yet synced, so they may not be
        flushed: propose a synced entry (a flush mark that changes nothing) to make them
        durable on a majority. At most once per flush round."""
        durable, end, flushed = self._replica.read(
            lambda log: (log.durable_end_offset, log.end_offset, log.flushed_offsets)
        )
        if durable < end:
            mine = flushed[spec.replica_id]
            # ``start`` = the offset itself: it changes nothing, even on a stale view.
            self._replica.mark_flushed(spec.replica_id, mine, mine)

    def _next_rows(self, spec: ReplicaSpec) -> tuple[FlushBatch, int, int]:
        """The next batch past this replica's flushed offset, from memory or, for a replica
        that lagged past the evicted offset, from a peer; and its range."""
        batch_max = self._limits.flush_batch_messages_max

        def from_memory(log: PartitionLog) -> tuple[int, int, FlushBatch | None]:
            # Under the partition's lock: copy references, build nothing per message.
            start = log.flushed_offsets[spec.replica_id]
            if log.lagging(spec.replica_id):
                return start, min(log.evicted_offset, start + batch_max), None
            # Only what a majority has on disk: see PartitionLog.durable_end_offset.
            end = min(log.durable_end_offset, start + batch_max)
            batch = FlushBatch(
                messages=log.read(start, end), bitmasks=log.replicated_bitmasks(start, end)
            )
            return start, end, batch

        start, end, batch = self._replica.read(from_memory)
        if batch is not None:
            return batch, start, end
        copied = FlushBatch.of_stored(self._peer_read(spec, start, end))
        return copied, start, start + len(copied)


def _age_cutoff_ms(partition_now_ms: int, retention_ms: int) -> int | None:
    """Messages stamped before it leave (``None``: no age retention, or no time yet).

    Partition time (``PartitionLog.clock_ms``, moved on by the elapsed time this host has
    seen: ``_partition_now_ms``), never this broker's wall clock: messages are stamped with
    partition time when applied, so both sides of the comparison come from the same
    replicated clock. The leader's wall clock running ahead, or a proposer's running behind,
    by ``retention_ms`` would otherwise make young messages look old and delete them on
    every replica before any consumer saw them. (A proposer whose clock runs ahead still
    moves partition time ahead for every message: that skew is the residue.)"""
    if not retention_ms or partition_now_ms == 0:
        return None
    return partition_now_ms - retention_ms
