"""``/logs``: produce (POST), and pop (GET with ``consumer_id``) or fetch (GET with ``topic``,
``partition_id`` and ``offset``)."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.log_router import LogRouter
from protocol.limits import Limits
from protocol.requests import Fetch, Pop, Produce
from runtime.http_api import json_response, request_deadline, request_params


def blueprint(router: LogRouter, limits: Limits) -> Blueprint:
    api = Blueprint("logs", __name__)

    @api.post("/logs")
    def produce() -> Response:
        request = Produce.parse(request_params(), limits)
        return json_response(router.produce(request, request_deadline(limits)), 201)

    @api.get("/logs")
    def consume() -> Response:
        params = request_params()
        deadline = request_deadline(limits)
        if params.get("consumer_id") is not None:
            return json_response(router.pop(Pop.parse(params, limits), deadline))
        return json_response(router.fetch(Fetch.parse(params, limits), deadline))

    return api
