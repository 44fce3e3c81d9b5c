"""``/cluster`` (answered by any manager, leader or not), ``/overview`` (the leader: it
polls the brokers) and ``/managers`` (adding and removing managers, on the leader)."""

from __future__ import annotations

from manager.cluster import ClusterView
from protocol.access import Action
from protocol.requests import ManagerRef
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, view: ClusterView) -> None:
    @api.get("/cluster", Action.DESCRIBE)
    def cluster(http: HttpRequest) -> HttpResponse:
        return json_response(view.cluster())

    @api.post("/managers", Action.ADMIN)
    def add_manager(http: HttpRequest) -> HttpResponse:
        body, status = view.add_manager(ManagerRef.parse(request_params(http), view.limits))
        return json_response(body, status)

    @api.route("DELETE", "/managers", Action.ADMIN)
    def remove_manager(http: HttpRequest) -> HttpResponse:
        manager_id = ManagerRef.parse_id(request_params(http), view.limits)
        return json_response(view.remove_manager(manager_id))

    @api.get("/overview", Action.DESCRIBE)
    def overview(http: HttpRequest) -> HttpResponse:
        return json_response(view.overview())
