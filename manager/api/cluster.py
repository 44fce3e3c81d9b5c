"""``/cluster`` (answered by any manager, leader or not) and ``/overview`` (the leader: it
polls the brokers)."""

from __future__ import annotations

from manager.cluster import ClusterView
from protocol.access import Action
from runtime.http_api import App, json_response
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, view: ClusterView) -> None:
    @api.get("/cluster", Action.DESCRIBE)
    def cluster(http: HttpRequest) -> HttpResponse:
        return json_response(view.cluster())

    @api.get("/overview", Action.DESCRIBE)
    def overview(http: HttpRequest) -> HttpResponse:
        return json_response(view.overview())
