"""``/`` (health), ``/raft_status`` and ``/metrics``."""

from __future__ import annotations

from broker.limits_check import limits_as_json
from broker.service import BrokerService
from protocol.access import Action
from protocol.limits import Limits
from runtime.http_api import App, json_response, text_response
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics


def add_status_routes(
    api: App, service: BrokerService, broker_id: int, metrics: Metrics, limits: Limits
) -> None:
    limits_json = limits_as_json(limits)

    @api.get("/", Action.OPEN)
    def health(_http: HttpRequest) -> HttpResponse:
        return json_response({"status": "ok", "role": "broker", "broker_id": broker_id})

    @api.get("/raft_status", Action.NODE)
    def raft_status(_http: HttpRequest) -> HttpResponse:
        replicas = service.raft_statuses()
        return json_response({"broker_id": broker_id, "replicas": replicas, "limits": limits_json})

    @api.get("/metrics", Action.METRICS)
    def prometheus(_http: HttpRequest) -> HttpResponse:
        return text_response(metrics.render())
