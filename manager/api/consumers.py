"""``/consumers``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import RegisterConsumer
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("consumers", __name__)

    @api.post("/consumers")
    def register_consumer() -> Response:
        request = RegisterConsumer.parse(request_params(), limits)
        return json_response(service.register_consumer(request), 201)

    return api
