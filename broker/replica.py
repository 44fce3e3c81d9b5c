"""``HostedReplica``: one partition replica on this broker: its Raft node and its flusher."""

from __future__ import annotations

import os

from broker.partition.raft import PartitionRaft
from broker.persistence.flusher import Flusher, PeerRead
from broker.persistence.store import MessageStore
from protocol.limits import Limits
from protocol.types import ReplicaSpec


class HostedReplica:
    def __init__(
        self,
        spec: ReplicaSpec,
        data_dir: str,
        secret: str,
        store: MessageStore,
        limits: Limits,
        peer_read: PeerRead,
    ) -> None:
        self.spec = spec
        replica_dir = os.path.join(data_dir, "replicas", f"{spec.topic}-{spec.partition_id}")
        self.raft = PartitionRaft(spec, replica_dir, secret, limits)
        self.flusher = Flusher(self.raft, store, limits, peer_read)
        self.flusher.start()

    def close(self) -> None:
        self.flusher.stop()
        self.raft.destroy()
