"""``/`` (health), ``/raft_status`` and ``/metrics``."""

from __future__ import annotations

from flask import Blueprint, Response

from broker.service import BrokerService
from runtime.http_api import json_response
from runtime.metrics import Metrics


def status_blueprint(service: BrokerService, broker_id: int, metrics: Metrics) -> Blueprint:
    api = Blueprint("status", __name__)

    @api.get("/")
    def health() -> Response:
        return json_response({"status": "ok", "role": "broker", "broker_id": broker_id})

    @api.get("/raft_status")
    def raft_status() -> Response:
        return json_response({"broker_id": broker_id, "replicas": service.raft_statuses()})

    @api.get("/metrics")
    def prometheus() -> Response:
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")

    return api
