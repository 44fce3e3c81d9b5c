"""``ClusterView``: this manager's Raft status and the cluster summary (the Nimbus
ClusterSummary idea). Any manager answers; peers are asked with a short timeout."""

from __future__ import annotations

import time
from concurrent.futures import Executor
from dataclasses import replace
from importlib import metadata

from manager.config import ManagerConfig, Peer
from manager.peer_check import peer_list
from manager.replicated import ReplicatedRegistry
from manager.service import ManagerService
from protocol.errors import RaftQError
from runtime.http_client import JsonHttpClient, PeerLink


def _version() -> str:
    try:
        return metadata.version("raftq")
    except metadata.PackageNotFoundError:
        return "unknown"


PUBLIC_RAFT_STATUS = ("id", "is_leader", "state", "leader_address", "term")
"""Who leads, for anyone (the load balancer and ``raftq cluster status`` need it)."""


class ClusterView:
    def __init__(
        self,
        config: ManagerConfig,
        raft: ReplicatedRegistry,
        service: ManagerService,
        executor: Executor,
        link: PeerLink,
    ) -> None:
        self._config = config
        self._raft = raft
        self._service = service
        self._executor = executor
        self._version = _version()
        self._started_s = time.monotonic()
        limits = config.limits
        self._peer_http = JsonHttpClient(
            replace(limits, http_retries_max=1),
            link,
            timeout_s=limits.http_connect_timeout_s,
        )

    def leader_http_url(self) -> str | None:
        address = self._raft.leader_raft_address()
        peer = None if address is None else self._config.peer_by_raft_address(address)
        return None if peer is None else peer.http_url

    def raft_status(self) -> dict[str, object]:
        """Everything (for nodes); ``PUBLIC_RAFT_STATUS`` names what anyone may see."""
        status = self._raft.status()
        return {
            "id": self._config.manager_id,
            "is_leader": self._raft.is_leader(),  # the same test the API uses to refuse
            "state": status.role,
            "leader": status.leader_raft_address,
            "leader_address": self.leader_http_url(),
            "term": status.term,
            "commit_index": status.commit_index,
            "last_applied": status.last_applied,
            "partners": self._config.partner_raft_addresses,
            "peers": peer_list(self._config.peers),
            "has_quorum": status.has_quorum,
            "uptime_s": int(time.monotonic() - self._started_s),
            "version": self._version,
        }

    def cluster(self) -> dict[str, object]:
        futures = [
            (peer, self._executor.submit(self._peer_summary, peer))
            for peer in self._config.peers
            if peer.manager_id != self._config.manager_id
        ]
        managers = [self._summary(self._config.http_url, self.raft_status())]
        managers += [future.result() for _, future in futures]
        managers.sort(key=lambda m: int(str(m["id"])))
        return {
            "managers": managers,
            "brokers": self._service.brokers()["brokers"],
            "topics": self._service.topics()["topics"],
        }

    def overview(self) -> dict[str, object]:
        """``cluster()`` and every partition's replicas with their figures: what the load
        balancer's dashboard (``/ui``) shows, in one request."""
        return {**self.cluster(), "partitions": self._service.partition_overview()}

    def _peer_summary(self, peer: Peer) -> dict[str, object]:
        try:
            body = self._peer_http.call_ok("GET", f"{peer.http_url}/raft_status", idempotent=True)
        except RaftQError:
            body = None
        if not isinstance(body, dict):
            return {
                "id": peer.manager_id,
                "address": peer.http_url,
                "is_leader": False,
                "uptime_s": None,
                "version": None,
                "alive": False,
            }
        return self._summary(peer.http_url, body)

    def _summary(self, address: str, status: dict[str, object]) -> dict[str, object]:
        return {
            "id": status.get("id"),
            "address": address,
            "is_leader": status.get("is_leader") is True,
            "uptime_s": status.get("uptime_s"),
            "version": status.get("version"),
            "alive": True,
        }
