"""``/topics``."""

from __future__ import annotations

from manager.services import TopicService
from protocol.access import Action
from protocol.limits import Limits
from protocol.requests import CreateTopic
from runtime.http_api import App, json_response, request_params
from runtime.http_server import HttpRequest, HttpResponse


def add_routes(api: App, service: TopicService, limits: Limits) -> None:
    @api.post("/topics", Action.ADMIN)
    def create_topic(http: HttpRequest) -> HttpResponse:
        return json_response(
            service.create_topic(CreateTopic.parse(request_params(http), limits)), 201
        )

    @api.get("/topics", Action.DESCRIBE)
    def list_topics(http: HttpRequest) -> HttpResponse:
        return json_response(service.topics())
