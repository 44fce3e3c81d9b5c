"""``HostedReplica``: one partition replica on this broker: its replicated log (behind group
commit) and its flusher."""

from __future__ import annotations

from broker.partition.raft import PartitionMachine
from broker.partition.replica import PartitionReplica
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
    ) -> None:
        self.spec = spec
        self.partition = PartitionReplica(spec, machine, limits)
        self.flusher = Flusher(self.partition, store, limits, peer_read)
        self.flusher.start()

    def respec(self, spec: ReplicaSpec) -> None:
        """The partition's replicas changed (re-replication); the flusher reads the spec
        from the partition, so its peer copies ask the new replicas."""
        self.spec = spec
        self.partition.respec(spec)

    def close(self) -> None:
        self.flusher.stop()
        self.partition.close()

    def discard(self) -> None:
        """Stop it and delete its Raft files (the store's rows are the service's)."""
        self.flusher.stop()
        self.partition.discard()
