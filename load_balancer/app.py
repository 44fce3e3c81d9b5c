"""The load balancer's Flask app: health, status and metrics here; everything else forwarded.

``create_app`` runs inside each gunicorn worker (after the fork) and starts that worker's
``LeaderTracker`` thread; the Flask request threads call the ``Forwarder``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from flask import Flask, Response, request

from load_balancer.config import LoadBalancerConfig
from load_balancer.forwarder import Forwarder, IncomingRequest
from load_balancer.leader_tracker import LeaderTracker
from runtime.http_api import install_error_handlers, json_response
from runtime.metrics import Metrics

FORWARDED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
EXTENSION_KEY = "raftq_load_balancer"


@dataclass(frozen=True, slots=True)
class LoadBalancerState:
    """What ``create_app`` built; tests stop it through ``app.extensions[EXTENSION_KEY]``."""

    tracker: LeaderTracker
    forwarder: Forwarder

    def close(self) -> None:
        self.tracker.stop()
        self.forwarder.close()


def create_app(config: LoadBalancerConfig) -> Flask:
    metrics = Metrics("raftq_lb")
    tracker = LeaderTracker(config.manager_urls, config.limits)
    forwarder = Forwarder(tracker, config.limits, metrics, threads=config.threads)
    metrics.gauge("leader_known", lambda: {(): 0.0 if tracker.leader_url is None else 1.0})
    app = Flask("load_balancer")
    install_error_handlers(app, config.limits)
    app.extensions[EXTENSION_KEY] = LoadBalancerState(tracker, forwarder)
    _add_own_routes(app, tracker, metrics)
    _add_forwarding_routes(app, forwarder)
    tracker.start()
    return app


def _add_own_routes(app: Flask, tracker: LeaderTracker, metrics: Metrics) -> None:
    @app.get("/")
    def health() -> Response:
        return json_response(
            {"status": "ok", "role": "load_balancer", "leader_address": tracker.leader_url}
        )

    @app.get("/raft_status")
    def raft_status() -> Response:
        return json_response(
            {
                "leader_address": tracker.leader_url,
                "managers": [view.to_json() for view in tracker.views],
            }
        )

    @app.get("/metrics")
    def metrics_text() -> Response:
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")


def _add_forwarding_routes(app: Flask, forwarder: Forwarder) -> None:
    def forward(path: str = "") -> Response:
        answer = forwarder.forward(
            IncomingRequest(
                method=request.method,
                path_and_query=_path_and_query(),
                headers=tuple(request.headers.items()),
                body=request.get_data(cache=False),
                client_address=request.remote_addr,
            )
        )
        return Response(answer.body, status=answer.status, headers=list(answer.headers))

    # "/" answers GET itself (health); every other method on "/" is forwarded.
    app.add_url_rule(
        "/",
        "forward_root",
        forward,
        methods=[m for m in FORWARDED_METHODS if m not in ("GET", "HEAD")],
        provide_automatic_options=False,
    )
    app.add_url_rule(
        "/<path:path>",
        "forward",
        forward,
        methods=list(FORWARDED_METHODS),
        provide_automatic_options=False,
    )


def _path_and_query() -> str:
    """The request target as the client wrote it (percent-encoding kept)."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI")
    if isinstance(raw, str) and raw.startswith("/"):
        return raw
    query = request.query_string.decode("latin-1")
    path = quote(request.path, safe="/:@!$&'()*+,;=-._~")
    return f"{path}?{query}" if query else path
