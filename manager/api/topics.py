"""``/topics``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import CreateTopic
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("topics", __name__)

    @api.post("/topics")
    def create_topic() -> Response:
        return json_response(service.create_topic(CreateTopic.parse(request_params(), limits)), 201)

    @api.get("/topics")
    def list_topics() -> Response:
        return json_response(service.topics())

    return api
