"""``/producers``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import TopicRef
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("producers", __name__)

    @api.post("/producers")
    def register_producer() -> Response:
        request = TopicRef.parse(request_params(), limits)
        return json_response(service.register_producer(request), 201)

    return api
