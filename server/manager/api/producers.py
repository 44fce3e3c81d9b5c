"""``/producers``."""

from __future__ import annotations

from manager.services import ClientService
from protocol.access import Action, require_topic
from protocol.limits import Limits
from protocol.requests import RegisterProducer
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, service: ClientService, limits: Limits) -> None:
    @api.post("/producers", Action.PRODUCE)
    def register_producer(http: HttpRequest) -> HttpResponse:
        request = RegisterProducer.parse(request_params(http), limits)
        require_topic(http.principal, Action.PRODUCE, request.topic)
        body, created = service.register_producer(request, http.principal)
        return json_response(body, 201 if created else 200)
