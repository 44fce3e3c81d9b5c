"""``/brokers``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import RegisterBroker
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("brokers", __name__)

    @api.post("/brokers")
    def register_broker() -> Response:
        body, status = service.register_broker(RegisterBroker.parse(request_params(), limits))
        return json_response(body, status)

    @api.get("/brokers")
    def list_brokers() -> Response:
        return json_response(service.brokers())

    return api
