"""``/``, ``/raft_status`` and ``/metrics``: answered by any manager, leader or not."""

from __future__ import annotations

from manager.cluster import ClusterView
from runtime.http_api import App, json_response, text_response
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def add_routes(api: App, manager_id: int, view: ClusterView, metrics: Metrics) -> None:
    @api.get("/")
    def health(http: HttpRequest) -> HttpResponse:
        return json_response({"status": "ok", "role": "manager", "id": manager_id})

    @api.get("/raft_status")
    def raft_status(http: HttpRequest) -> HttpResponse:
        return json_response(view.raft_status())

    @api.get("/metrics")
    def metrics_text(http: HttpRequest) -> HttpResponse:
        return text_response(metrics.render())
