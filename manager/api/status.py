"""``/``, ``/raft_status`` and ``/metrics``: answered by any manager, leader or not."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.cluster import ClusterView
from runtime.http_api import json_response
from runtime.metrics import Metrics


def blueprint(manager_id: int, view: ClusterView, metrics: Metrics) -> Blueprint:
    api = Blueprint("status", __name__)

    @api.get("/")
    def health() -> Response:
        return json_response({"status": "ok", "role": "manager", "id": manager_id})

    @api.get("/raft_status")
    def raft_status() -> Response:
        return json_response(view.raft_status())

    @api.get("/metrics")
    def metrics_text() -> Response:
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")

    return api
