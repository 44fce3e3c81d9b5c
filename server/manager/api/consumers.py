"""``/consumers``."""

from __future__ import annotations

from manager.services import ClientService
from protocol.access import Action, require_topic
from protocol.limits import Limits
from protocol.requests import RegisterConsumer
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, service: ClientService, limits: Limits) -> None:
    @api.post("/consumers", Action.CONSUME)
    def register_consumer(http: HttpRequest) -> HttpResponse:
        request = RegisterConsumer.parse(request_params(http), limits)
        require_topic(http.principal, Action.CONSUME, request.topic)
        return json_response(service.register_consumer(request, http.principal), 201)
