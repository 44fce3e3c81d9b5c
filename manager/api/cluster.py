"""``/cluster``: answered by any manager, leader or not."""

from __future__ import annotations

from flask import Blueprint, Response

from manager.cluster import ClusterView
from runtime.http_api import json_response


def blueprint(view: ClusterView) -> Blueprint:
    api = Blueprint("cluster", __name__)

    @api.get("/cluster")
    def cluster() -> Response:
        return json_response(view.cluster())

    return api
