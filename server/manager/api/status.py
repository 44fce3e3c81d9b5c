"""``/``, ``/raft_status`` and ``/metrics``: answered by any manager, leader or not."""

from __future__ import annotations

from manager.cluster import PUBLIC_RAFT_STATUS, ClusterView
from protocol.access import Action, Node
from runtime.http_api import App, json_response, text_response
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def add_routes(api: App, manager_id: int, view: ClusterView, metrics: Metrics) -> None:
    @api.get("/", Action.OPEN)
    def health(http: HttpRequest) -> HttpResponse:
        return json_response({"status": "ok", "role": "manager", "id": manager_id})

    @api.get("/raft_status", Action.OPEN)
    def raft_status(http: HttpRequest) -> HttpResponse:
        # Who leads is public (the load balancer and `raftq cluster status` need it); the
        # rest (peers, indexes, addresses) only for nodes.
        status = view.raft_status()
        if isinstance(http.principal, Node):
            return json_response(status)
        return json_response({k: status[k] for k in PUBLIC_RAFT_STATUS if k in status})

    @api.get("/metrics", Action.METRICS)
    def metrics_text(http: HttpRequest) -> HttpResponse:
        return text_response(metrics.render())
