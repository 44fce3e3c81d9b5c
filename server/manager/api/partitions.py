"""``/partitions``."""

from __future__ import annotations

from manager.services import ManagerServices
from protocol.access import Action
from protocol.limits import Limits
from protocol.requests import TopicRef
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, services: ManagerServices, limits: Limits) -> None:
    @api.get("/partitions", Action.DESCRIBE)
    def list_partitions(http: HttpRequest) -> HttpResponse:
        return json_response(
            services.topics.partitions(TopicRef.parse(request_params(http), limits))
        )

    @api.get("/lag", Action.DESCRIBE)
    def consumer_lag(http: HttpRequest) -> HttpResponse:
        return json_response(
            services.lag.consumer_lag(TopicRef.parse(request_params(http), limits))
        )

    @api.post("/partitions", Action.ADMIN)
    def add_partition(http: HttpRequest) -> HttpResponse:
        request = TopicRef.parse(request_params(http), limits)
        return json_response(services.topics.add_partition(request), 201)
