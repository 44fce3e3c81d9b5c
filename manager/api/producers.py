"""``/producers``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import RegisterProducer
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("producers", __name__)

    @api.post("/producers")
    def register_producer() -> Response:
        request = RegisterProducer.parse(request_params(), limits)
        body, created = service.register_producer(request)
        return json_response(body, 201 if created else 200)

    return api
