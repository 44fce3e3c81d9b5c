"""``ClusterView``: this manager's Raft status and the cluster summary (the Nimbus
ClusterSummary idea). Any manager answers; peers are asked with a short timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import replace
from importlib import metadata

from manager.address_proof import AddressCheck
from manager.config import ManagerConfig, Peer
from manager.peer_check import peer_list
from manager.raft import RegistryMachine, leads
from manager.registry.commands import AddManager, RemoveManager
from manager.registry.managers import ManagerEntry
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.services import ManagerServices, check_outcome
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import ManagerRef
from runtime.http_client import JsonHttpClient, PeerLink


def _version() -> str:
    try:
        return metadata.version("raftq")
    except metadata.PackageNotFoundError:
        return "unknown"


PUBLIC_RAFT_STATUS = ("id", "is_leader", "state", "leader_address", "term", "uptime_s", "version")
"""Who leads, for anyone (the load balancer and ``raftq cluster status`` need it), and what
``/cluster`` shows of each manager: the managers ask each other for it without a
credential (issue 23: no client request makes the cluster send one anywhere)."""

AddressCheckFn = Callable[[ManagerRef], None]
"""Raises unless the manager a ``POST /managers`` names proved its address
(``manager.address_proof.AddressCheck.check``)."""


class ClusterView:
    def __init__(
        self,
        config: ManagerConfig,
        raft: RegistryMachine,
        service: ManagerServices,
        executor: Executor,
        link: PeerLink,
        address_check: AddressCheckFn | None = None,
    ) -> None:
        """``address_check``: the leader's check before it adds a manager (default: the
        challenge of ``manager.address_proof``)."""
        self._config = config
        self._raft = raft
        self._service = service
        self._executor = executor
        self.limits = config.limits
        self._version = _version()
        self._started_s = time.monotonic()
        limits = config.limits
        once = replace(limits, http_retries_max=1)
        # No credential: /cluster needs only what anyone may see of a peer.
        self._peer_http = JsonHttpClient(
            once, link.without_credential(), timeout_s=limits.http_connect_timeout_s
        )
        if address_check is None:
            address_check = AddressCheck(config.secret, limits, link).check
        self._address_check = address_check

    def peers(self) -> tuple[Peer, ...]:
        """The managers today: this one's file, with the managers added and removed since
        (``ManagerRegistry``)."""
        return self._raft.read(lambda s: effective_peers(self._config.peers, s))

    def leader_http_url(self) -> str | None:
        address = self._raft.status().leader
        peers = [p for p in self.peers() if p.raft_address == address]
        return peers[0].http_url if peers else None

    # --- membership ----------------------------------------------------------------------
    def add_manager(self, request: ManagerRef) -> tuple[dict[str, object], int]:
        """Add one manager, whose process runs already (with every member and itself in
        its ``--peers``; it waits to be added): it proves its address first
        (``manager.address_proof``), then it is recorded (every manager then knows its
        HTTP address), then its Raft node joins the group, committed before the answer.
        200 when it is a member already; 409 ID_TAKEN for an id or address in use or
        retired; 400 when it did not prove its address."""
        peer = Peer(request.manager_id, request.http_url, request.raft_address)
        known = {p.manager_id: p for p in self.peers()}
        if known.get(peer.manager_id) == peer and peer.raft_address in self._members():
            return self._managers_body(), 200
        clash = [p for p in known.values() if p != peer and p.manager_id == peer.manager_id]
        clash += [p for p in known.values() if p.raft_address == peer.raft_address and p != peer]
        if clash:
            raise RaftQError(
                ErrorCode.ID_TAKEN,
                f"manager {clash[0].manager_id} is at {clash[0].http_url} "
                f"({clash[0].raft_address}): choose another id and address",
            )
        away = len(self._members()) - self._raft.replicas_answering()
        if peer.raft_address not in self._members() and away > 0:
            # The new member has not started yet: with one away too, the group would be
            # one failure from a standstill (etcd refuses such an add as well).
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{away} manager(s) do not answer the leader: bring them back, or remove "
                "them, before adding one",
            )
        # Before anything is recorded or the Raft group counts it: an admin key must not
        # be able to make the cluster trust (and later call) an address of its choosing.
        self._address_check(request)
        outcome = self._raft.propose(AddManager(peer.manager_id, peer.http_url, peer.raft_address))
        if outcome is Outcome.EXISTS:
            raise RaftQError(
                ErrorCode.ID_TAKEN, f"manager id {peer.manager_id} was removed: use another"
            )
        check_outcome(outcome, f"manager {peer.manager_id}")
        if peer.raft_address not in self._members():
            self._raft.change_member(peer.raft_address, add=True)
        return self._managers_body(), 201

    def remove_manager(self, manager_id: int) -> dict[str, object]:
        """Remove one manager: its Raft node leaves the group (committed), then the removal
        is recorded and its id retired. The leader cannot remove itself: it hands leadership
        to another member and answers 503 NOT_LEADER, so the load balancer repeats the
        request at the new leader. At least ``MANAGERS_MIN`` stay."""
        peers = {p.manager_id: p for p in self.peers()}
        peer = peers.get(manager_id)
        if peer is None:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no manager {manager_id} is a member")
        if len(peers) <= MANAGERS_MIN:
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{len(peers)} managers are members: at least {MANAGERS_MIN} stay (add one first)",
            )
        if manager_id == self._config.manager_id:
            # To the member that holds the most (a named one may be down or behind, and
            # then the Raft layer refuses every time).
            self._raft.transfer_leadership(None)
            raise RaftQError(
                ErrorCode.NOT_LEADER,
                f"manager {manager_id} leads and cannot remove itself: leadership is being "
                "handed to another manager; repeat the request",
                self.leader_http_url(),
            )
        if peer.raft_address in self._members():
            self._check_quorum_after(len(self._members()) - 1)
            self._raft.change_member(peer.raft_address, add=False)
        outcome = self._raft.propose(
            RemoveManager(peer.manager_id, peer.http_url, peer.raft_address)
        )
        check_outcome(outcome, f"manager {manager_id}")
        return self._managers_body()

    def _check_quorum_after(self, members: int) -> None:
        """Refuse a removal after which the members that answer the leader could be fewer
        than a majority (etcd's strict reconfiguration check; the leaving one is counted
        as answering: the worst case)."""
        answering = self._raft.replicas_answering() - 1
        majority = members // 2 + 1
        if answering < majority:
            raise RaftQError(
                ErrorCode.INVALID_FIELD,
                f"{answering} of the managers would answer the leader, and {members} members "
                f"need {majority}: bring the others back (or remove a dead one) first",
            )

    def _members(self) -> frozenset[str]:
        return self._raft.members() | {self._config.raft_address}

    def _managers_body(self) -> dict[str, object]:
        return {"managers": [_peer_json(p) for p in self.peers()]}

    def raft_status(self) -> dict[str, object]:
        """Everything (for nodes); ``PUBLIC_RAFT_STATUS`` names what anyone may see."""
        status = self._raft.status()
        return {
            "id": self._config.manager_id,
            "is_leader": leads(self._raft),  # the same test the API uses to refuse
            "state": status.role.value,
            "leader": status.leader,
            "leader_address": self.leader_http_url(),
            "term": status.term,
            "commit_index": status.commit_index,
            "last_applied": status.last_applied,
            "partners": list(status.partners),
            "peers": peer_list(self.peers()),
            "peers_changed": self._raft.read(lambda s: s.managers.changed),
            "has_quorum": status.has_quorum,
            "uptime_s": int(time.monotonic() - self._started_s),
            "version": self._version,
        }

    def cluster(self) -> dict[str, object]:
        futures = [
            (peer, self._executor.submit(self._peer_summary, peer))
            for peer in self.peers()
            if peer.manager_id != self._config.manager_id
        ]
        managers = [self._summary(self._config.http_url, self.raft_status())]
        managers += [future.result() for _, future in futures]
        managers.sort(key=lambda m: int(str(m["id"])))
        return {
            "managers": managers,
            "brokers": self._service.brokers.brokers()["brokers"],
            "topics": self._service.topics.topics()["topics"],
        }

    def overview(self) -> dict[str, object]:
        """``cluster()`` and every partition's replicas with their figures: what the load
        balancer's dashboard (``/ui``) shows, in one request."""
        return {**self.cluster(), "partitions": self._service.brokers.partition_overview()}

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


MANAGERS_MIN = 3
"""Fewer managers could not outlive the loss of one."""


def effective_peers(started: tuple[Peer, ...], state: ManagerState) -> tuple[Peer, ...]:
    """The managers a node file lists, with the changes recorded since."""
    entries = [ManagerEntry(p.manager_id, p.http_url, p.raft_address) for p in started]
    return tuple(
        Peer(m.manager_id, m.http_url, m.raft_address) for m in state.managers.effective(entries)
    )


def _peer_json(peer: Peer) -> dict[str, object]:
    return {"id": peer.manager_id, "address": peer.http_url, "raft_address": peer.raft_address}
