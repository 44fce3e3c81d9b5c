"""``create_app(config)``: builds a broker: its store, its replicas (they rejoin their Raft
groups), registration with the managers, and the HTTP API."""

from __future__ import annotations

import logging
import os
import time

from broker.access import KeyVerifier
from broker.api.logs import add_log_routes
from broker.api.partitions import add_partition_routes
from broker.api.status import add_status_routes
from broker.config import BrokerConfig
from broker.partition.raft import PartitionRaft
from broker.peer_copy import PeerCopy
from broker.persistence.sql_store import SqlMessageStore
from broker.registration import Registration
from broker.replica import HostedReplica
from broker.service import BrokerService
from protocol.durable_files import make_directories
from protocol.openapi import Node, api_document
from protocol.requests import RegisterBroker
from protocol.types import BrokerId, ReplicaSpec
from runtime.http_api import App, add_document_route
from runtime.http_auth import authenticator
from runtime.http_client import PeerLink
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def create_app(config: BrokerConfig) -> App:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    make_directories(config.data_dir)
    store = SqlMessageStore(config.db_url)

    link = PeerLink.of(config.secret, config.tls)
    peers = PeerCopy(config.limits, link)

    def make_replica(spec: ReplicaSpec) -> HostedReplica:
        replica_dir = os.path.join(config.data_dir, "replicas", f"{spec.topic}-{spec.partition_id}")
        raft = PartitionRaft(spec, replica_dir, config.secret, config.limits)
        return HostedReplica(spec, raft, store, config.limits, peers.read)

    service = BrokerService(store, make_replica, config.limits, lambda: int(time.time() * 1000))
    service.start()
    metrics = Metrics("raftq_broker")
    _register_gauges(metrics, service)

    keys = KeyVerifier(config.managers_url, config.limits, link)
    app = App("broker", config.limits, authenticator(link.node_token, keys.grant))
    add_status_routes(app, service, config.broker_id, metrics)
    add_document_route(app, api_document(Node.BROKER))
    add_log_routes(app, service, config.limits)
    add_partition_routes(app, service, config.broker_id, config.limits)
    _count_requests(app, metrics)

    registration = Registration(config.managers_url, _announcement(config), config.limits, link)
    registration.start()
    app.on_close(service.close)
    return app


def _announcement(config: BrokerConfig) -> RegisterBroker:
    return RegisterBroker(
        broker_id=BrokerId(config.broker_id),
        address=config.address,
        raft_host=config.host,
        raft_port_min=config.raft_port_min,
        raft_port_max=config.raft_port_max,
    )


def _register_gauges(metrics: Metrics, service: BrokerService) -> None:
    def end_offsets() -> dict[tuple[tuple[str, str], ...], float]:
        return {
            (("partition", str(s.spec.partition_id)), ("topic", s.spec.topic)): s.end_offset
            for s in service.statuses()
        }

    metrics.gauge("partition_end_offset", end_offsets)


def _count_requests(app: App, metrics: Metrics) -> None:
    def count(request: HttpRequest, response: HttpResponse, _route: str | None) -> None:
        metrics.inc("http_requests", method=request.method, status=str(response.status))

    app.after_request(count)
