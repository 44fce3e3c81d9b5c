"""``create_app(config)``: builds the manager, Raft node and leader-duties thread included."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from manager.address_proof import PROOF_PATH, AddressProver, add_proof_route
from manager.api import (
    brokers,
    cluster,
    consumers,
    groups,
    keys,
    logs,
    partitions,
    producers,
    status,
    topics,
)
from manager.broker_client import BrokerClient, BrokerRefusalError
from manager.broker_monitor import BrokerMonitor
from manager.cluster import ClusterView
from manager.config import ManagerConfig
from manager.dead_letter_mover import DeadLetterMover
from manager.leader_duties import LeaderDuties
from manager.log_router import LogRouter
from manager.raft import RegistryMachine, leads, registry_raft
from manager.redrive import Redriver
from manager.registry.state import ManagerState
from manager.replica_mover import ReplicaMover
from manager.services import ManagerServices, ServiceContext
from protocol.errors import ErrorCode, RaftQError
from protocol.openapi import Node, api_document
from runtime.http_api import App, add_document_route, count_requests, json_response
from runtime.http_auth import NodeVerifier, authenticator
from runtime.http_client import PeerLink
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics

_ANY_MANAGER = {
    ("GET", "/"),
    ("GET", "/raft_status"),
    ("GET", "/metrics"),
    ("GET", "/cluster"),
    ("GET", "/openapi.json"),
    ("POST", PROOF_PATH),
}
"""Requests a manager answers whether or not it leads; every other one needs the leader,
whose registry is the only one known to be up to date."""


def create_app(config: ManagerConfig) -> App:
    limits = config.limits
    raft = registry_raft(config)
    monitor = BrokerMonitor(limits.broker_dead_after_s)
    link = PeerLink.of(config.secret, config.tls, f"manager-{config.manager_id}")
    broker_client = BrokerClient(limits, link)
    request_executor = ThreadPoolExecutor(limits.manager_http_threads_max, "broker-call")
    poll_executor = ThreadPoolExecutor(limits.manager_http_threads_max, "broker-poll")
    service = ManagerServices.over(
        ServiceContext(limits, raft, broker_client, monitor, request_executor)
    )
    router = LogRouter(
        raft, broker_client, monitor, request_executor, poll_period_s=limits.long_poll_period_s
    )
    view = ClusterView(config, raft, service, request_executor, link)
    metrics = _metrics(raft)

    app = App(
        "manager",
        limits,
        authenticator(_node_verifier(config), service.keys.grant, config.metrics_token),
    )
    _install_leader_gate(app, raft, view)
    _install_refusal_passthrough(app)
    count_requests(app, metrics)
    status.add_routes(app, config.manager_id, view, metrics)
    add_document_route(app, api_document(Node.MANAGER))
    cluster.add_routes(app, view)
    add_proof_route(app, AddressProver(config), limits)
    topics.add_routes(app, service.topics, limits)
    partitions.add_routes(app, service, limits)
    producers.add_routes(app, service.clients, limits)
    consumers.add_routes(app, service.clients, limits)
    brokers.add_routes(app, service.brokers, limits)
    keys.add_routes(app, service, limits)
    groups.add_routes(app, service.groups, router, Redriver(limits, raft, router), limits)
    logs.add_routes(app, router, limits)

    mover = ReplicaMover(limits, raft, broker_client, monitor)
    dead_letters = DeadLetterMover(limits, raft, broker_client, router)
    LeaderDuties(
        limits, raft, service, broker_client, monitor, poll_executor, mover, dead_letters
    ).start()
    return app


def _node_verifier(config: ManagerConfig) -> NodeVerifier:
    """Requests signed for this manager: at its own address, or at the one its entry in its
    peers gives (what the other nodes call it by)."""
    mine = [p.http_url for p in config.peers if p.manager_id == config.manager_id]
    return NodeVerifier(
        config.secret,
        [config.http_url, *mine],
        config.limits,
        certified_only=config.tls.mutual,
    )


def _install_leader_gate(app: App, raft: RegistryMachine, view: ClusterView) -> None:
    def require_leader(request: HttpRequest) -> None:
        if (request.method, request.path) in _ANY_MANAGER or leads(raft):
            return
        raise RaftQError(
            ErrorCode.NOT_LEADER, "this manager is not the leader", view.leader_http_url()
        )

    app.before_request(require_leader)


def _install_refusal_passthrough(app: App) -> None:
    def refusal(error: BrokerRefusalError) -> HttpResponse:
        # A broker's own error goes back unchanged: status, body and Retry-After.
        response = json_response(error.answer.body, error.answer.status)
        retry_after = error.answer.headers.get("Retry-After")
        if retry_after is None:
            return response
        headers = (*response.headers, ("Retry-After", retry_after))
        return HttpResponse(response.status, response.body, headers)

    app.error_handler(BrokerRefusalError, refusal)


def _metrics(raft: RegistryMachine) -> Metrics:
    metrics = Metrics("raftq_manager")
    metrics.gauge("is_leader", lambda: {(): 1.0 if leads(raft) else 0.0})
    metrics.gauge("raft_term", lambda: {(): float(raft.status().term)})
    metrics.gauge("raft_commit_index", lambda: {(): float(raft.status().commit_index)})
    metrics.gauge(
        "registry_objects",
        lambda: raft.read(
            lambda s: {
                (("kind", "topics"),): float(len(s.topics)),
                (("kind", "brokers"),): float(len(s.brokers)),
                (("kind", "clients"),): float(len(s.clients)),
                (("kind", "groups"),): float(len(s.groups)),
            }
        ),
    )
    metrics.gauge("under_replicated_partitions", lambda: {(): float(raft.read(_under_replicated))})
    return metrics


def _under_replicated(state: ManagerState) -> int:
    """Partitions with a replica on a broker the managers hold dead, or moving to a new
    broker (re-replication: the new replica has not caught up yet)."""
    dead = {b.broker_id for b in state.brokers.all() if not b.alive}
    return sum(
        partition.moving is not None or any(r.broker_id in dead for r in partition.replicas)
        for topic in state.topics.all()
        for partition in topic.partitions
    )
