"""``HostedReplica``: one partition replica on this broker: its replicated log (behind group
commit) and its flusher, whose rounds the broker's one ``FlushPool`` runs (no thread of its
own)."""

from __future__ import annotations

from broker.partition.raft import PartitionMachine
from broker.partition.replica import PartitionReplica
from broker.persistence.flush_pool import FlushPool
from broker.persistence.flusher import Flusher, PeerRead
from broker.persistence.store import MessageStore
from protocol.limits import Limits
from protocol.types import ReplicaSpec


class HostedReplica:
    def __init__(
        self,
        spec: ReplicaSpec,
        machine: PartitionMachine,
        store: MessageStore,
        limits: Limits,
        peer_read: PeerRead,
        flush_pool: FlushPool,
    ) -> None:
        self.spec = spec
        self.partition = PartitionReplica(spec, machine, limits)
        self.flusher = Flusher(self.partition, store, limits, peer_read)
        self._flush_pool = flush_pool
        self._round_wait_s = limits.raft_commit_timeout_s
        """How long dropping the replica waits for a flush round of it already running: the
        longest a proposal waits for its commit (a round still running then is logged)."""
        flush_pool.add(self.flusher)

    def respec(self, spec: ReplicaSpec) -> None:
        """The partition's replicas changed (re-replication); the flusher reads the spec
        from the partition, so its peer copies ask the new replicas."""
        self.spec = spec
        self.partition.respec(spec)

    def close(self) -> None:
        """Stop it: no flush round starts again (one running ends on its own, as the
        broker stops), and its Raft node stops."""
        self._flush_pool.remove(self.flusher)
        self.partition.close()

    def discard(self) -> None:
        """Stop it and delete its Raft files (the store's rows are the service's). Returns
        once no flush round of it runs (or ``_round_wait_s`` passed): the service deletes
        its rows next, and a round still inserting would leave some behind."""
        removed = self._flush_pool.remove(self.flusher)
        self.partition.discard()
        removed.wait(self._round_wait_s)
