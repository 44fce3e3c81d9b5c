"""``/partitions``."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.service import ManagerService
from protocol.limits import Limits
from protocol.requests import TopicRef
from runtime.http_api import json_response, request_params


def blueprint(service: ManagerService, limits: Limits) -> Blueprint:
    api = Blueprint("partitions", __name__)

    @api.get("/partitions")
    def list_partitions() -> Response:
        return json_response(service.partitions(TopicRef.parse(request_params(), limits)))

    @api.post("/partitions")
    def add_partition() -> Response:
        request = TopicRef.parse(request_params(), limits)
        return json_response(service.add_partition(request), 201)

    return api
