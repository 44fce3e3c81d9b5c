"""``Flusher``: writes one replica's committed messages into its own database.

Thread: one daemon thread per hosted replica. Each round reads up to
``flush_batch_messages_max`` messages past this replica's flushed offset from ``msg_dict``,
inserts them in one transaction (idempotent: the primary key skips rows already there, so a
crash between the insert and the Raft command only repeats work), then proposes
``mark_flushed``. Once every in-sync replica has flushed a message it leaves ``msg_dict``;
a replica that lagged too far copies what left memory from a peer (``PeerRead``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from broker.partition.raft import PartitionRaft
from broker.persistence.store import FlushRow, MessageStore
from protocol.errors import RaftQError
from protocol.limits import Limits
from protocol.types import ReplicaSpec, StoredMessage

PeerRead = Callable[[ReplicaSpec, int, int], list[StoredMessage]]
"""Messages ``[start, end)`` of a partition from a peer replica (may return fewer)."""

_log = logging.getLogger(__name__)


class Flusher:
    def __init__(
        self, raft: PartitionRaft, store: MessageStore, limits: Limits, peer_read: PeerRead
    ) -> None:
        self._raft = raft
        self._store = store
        self._peer_read = peer_read
        self._limits = limits
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"flusher {raft.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        backoff_s = self._limits.flush_period_s
        while not self._stop.is_set():
            try:
                flushed = self.flush_once()
                backoff_s = self._limits.flush_period_s
            except (RaftQError, Exception) as exc:  # the DB or Raft may be down: retry later
                _log.warning("%s: flush failed: %s", self._raft.name, exc)
                flushed = 0
                backoff_s = min(backoff_s * 2, self._limits.flush_retry_backoff_s_max)
            if flushed == 0:
                self._stop.wait(backoff_s)

    def flush_once(self) -> int:
        """Flush one bounded batch; return how many messages it wrote."""
        spec = self._raft.spec
        rows, end = self._next_rows(spec)
        if not rows:
            return 0
        self._store.insert_messages(spec.topic, spec.partition_id, rows, end)
        self._raft.mark_flushed(spec.replica_id, end)
        return len(rows)

    def _next_rows(self, spec: ReplicaSpec) -> tuple[list[FlushRow], int]:
        """The next batch past this replica's flushed offset, from memory or, for a replica
        that lagged past the evicted offset, from a peer."""
        state = self._raft.state
        batch_max = self._limits.flush_batch_messages_max
        with state.lock:
            log = state.log
            start = log.flushed_offsets[spec.replica_id]
            if not log.lagging(spec.replica_id):
                end = min(log.end_offset, start + batch_max)
                rows = [
                    FlushRow(offset, key, value, timestamp_ms, log.replicated_bitmask(offset))
                    for offset, (key, value, timestamp_ms) in log.read(start, end)
                ]
                return rows, end
            end = min(log.evicted_offset, start + batch_max)
        copied = self._peer_read(spec, start, end)
        rows = [FlushRow(m.offset, m.key, m.value, m.timestamp_ms, 0) for m in copied]
        return rows, start + len(rows)
