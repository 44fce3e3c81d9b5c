"""``create_app(config)``: builds a broker inside the gunicorn worker (after the fork)."""

from __future__ import annotations

import logging
import os
import time

from flask import Flask, Request, Response, request

from broker.api.logs import logs_blueprint
from broker.api.partitions import partitions_blueprint
from broker.api.status import status_blueprint
from broker.config import BrokerConfig
from broker.partition.raft import PartitionRaft
from broker.peer_copy import PeerCopy
from broker.persistence.sql_store import SqlMessageStore
from broker.registration import Registration
from broker.replica import HostedReplica
from broker.service import BrokerService
from protocol.durable_files import make_directories
from protocol.requests import RegisterBroker
from protocol.types import BrokerId, ReplicaSpec
from runtime.http_api import install_error_handlers
from runtime.metrics import Metrics


def create_app(config: BrokerConfig) -> Flask:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    make_directories(config.data_dir)
    store = SqlMessageStore(config.db_url)

    peers = PeerCopy(config.limits)

    def make_replica(spec: ReplicaSpec) -> HostedReplica:
        replica_dir = os.path.join(config.data_dir, "replicas", f"{spec.topic}-{spec.partition_id}")
        raft = PartitionRaft(spec, replica_dir, config.secret, config.limits)
        return HostedReplica(spec, raft, store, config.limits, peers.read)

    service = BrokerService(store, make_replica, config.limits, lambda: int(time.time() * 1000))
    service.start()
    metrics = Metrics("raftq_broker")
    _register_gauges(metrics, service)

    app = Flask("broker")
    install_error_handlers(app, config.limits)
    app.register_blueprint(status_blueprint(service, config.broker_id, metrics))
    app.register_blueprint(logs_blueprint(service, config.limits))
    app.register_blueprint(partitions_blueprint(service, config.broker_id, config.limits))
    _count_requests(app, metrics)

    registration = Registration(config.managers_url, _announcement(config), config.limits)
    registration.start()
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


def _count_requests(app: Flask, metrics: Metrics) -> None:
    @app.after_request
    def _count(response: Response) -> Response:
        req: Request = request
        metrics.inc("http_requests", method=req.method, status=str(response.status_code))
        return response
