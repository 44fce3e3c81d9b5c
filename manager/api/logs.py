"""``/logs``: produce (POST), and pop (GET with ``consumer_id``) or fetch (GET with ``topic``,
``partition_id`` and ``offset``)."""

from __future__ import annotations

from manager.log_router import LogRouter
from protocol.limits import Limits
from protocol.requests import Fetch, Pop, Produce
from runtime.http_api import App, json_response, request_deadline, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, router: LogRouter, limits: Limits) -> None:
    @api.post("/logs")
    def produce(http: HttpRequest) -> HttpResponse:
        request = Produce.parse(request_params(http), limits)
        return json_response(router.produce(request, request_deadline(http, limits)), 201)

    @api.get("/logs")
    def consume(http: HttpRequest) -> HttpResponse:
        params = request_params(http)
        deadline = request_deadline(http, limits)
        if params.get("consumer_id") is not None:
            return json_response(router.pop(Pop.parse(params, limits), deadline))
        return json_response(router.fetch(Fetch.parse(params, limits), deadline))
