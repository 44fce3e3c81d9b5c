"""The load balancer's HTTP API: health, status and metrics here; everything else forwarded.

``create_app`` starts the ``LeaderTracker`` thread; the connection threads call the
``Forwarder``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from load_balancer.config import LoadBalancerConfig
from load_balancer.forwarder import Forwarder, IncomingRequest
from load_balancer.leader_tracker import LeaderTracker
from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.node_auth import LEGACY_TOKEN_HEADER, SIGNATURE_HEADER
from protocol.openapi import Node, api_document
from runtime.http_api import App, add_document_route, count_requests, json_response, text_response
from runtime.http_auth import scrape_authenticator
from runtime.http_server import HttpRequest, HttpResponse
from runtime.metrics import Metrics
from runtime.tls import client_context


@dataclass(frozen=True, slots=True)
class LoadBalancerState:
    """What ``create_app`` built; ``App.close`` stops it."""

    tracker: LeaderTracker
    forwarder: Forwarder

    def close(self) -> None:
        self.tracker.stop()
        self.forwarder.close()


def create_app(config: LoadBalancerConfig) -> App:
    metrics = Metrics("raftq_lb")
    tracker = LeaderTracker(config.manager_urls, config.limits, config.tls.ca_path)
    forwarder = Forwarder(tracker, config.limits, metrics, client_context(config.tls))
    metrics.gauge("leader_known", lambda: {(): 0.0 if tracker.leader_url is None else 1.0})
    token = config.metrics_token
    app = App(
        "load_balancer", config.limits, None if token is None else scrape_authenticator(token)
    )
    _add_own_routes(app, tracker, metrics, Action.OPEN if token is None else Action.METRICS)
    count_requests(app, metrics)
    _add_dashboard(app)
    add_document_route(app, api_document(Node.LOAD_BALANCER))
    _add_forwarding(app, forwarder)
    app.on_close(LoadBalancerState(tracker, forwarder).close)
    tracker.start()
    return app


def _add_own_routes(
    app: App, tracker: LeaderTracker, metrics: Metrics, metrics_action: Action
) -> None:
    """``metrics_action``: METRICS when the load balancer has a scrape token, else OPEN (it
    holds no cluster secret and checks no API key; its figures name no topic or client)."""

    @app.get("/", Action.OPEN)
    def health(_http: HttpRequest) -> HttpResponse:
        return json_response(
            {"status": "ok", "role": "load_balancer", "leader_address": tracker.leader_url}
        )

    @app.get("/raft_status", Action.OPEN)
    def raft_status(_http: HttpRequest) -> HttpResponse:
        return json_response(
            {
                "leader_address": tracker.leader_url,
                "managers": [view.to_json() for view in tracker.views],
            }
        )

    @app.get("/metrics", metrics_action)
    def metrics_text(_http: HttpRequest) -> HttpResponse:
        return text_response(metrics.render())


def refuse_node_requests(http: HttpRequest) -> None:
    """A node's request never goes through the load balancer (issue 23): whoever reads
    the client-facing traffic must find no node credential in it, and a manager refuses a
    request signed for another address anyway. Refused here, not forwarded, saying what to
    do: an older broker sends its static token here, a misconfigured one signs for it."""
    if http.header(LEGACY_TOKEN_HEADER) is not None:
        raise RaftQError(
            ErrorCode.FORBIDDEN,
            f"a node's request with the static node token ({LEGACY_TOKEN_HEADER}): the "
            "load balancer forwards no node request, and the managers take no static token "
            "any more. The sending node runs an older RaftQ: upgrade it; a broker then lists "
            "the managers' own URLs in --managers (ARCHITECTURE.md, 'Upgrading to signed "
            "node requests')",
        )
    if http.header(SIGNATURE_HEADER) is not None:
        raise RaftQError(
            ErrorCode.FORBIDDEN,
            "a signed node request: the load balancer forwards no node request (they go "
            "straight to the node they are for: a broker's --managers lists the managers' "
            "own URLs, not the load balancer's)",
        )


_DASHBOARD = Path(__file__).with_name("dashboard.html")


def _add_dashboard(app: App) -> None:
    """``/ui``: the live dashboard, one static page (read once) whose script reads the
    cluster through this load balancer with the API key the user gives it."""
    page = HttpResponse(
        200,
        _DASHBOARD.read_bytes(),
        (("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-cache")),
    )

    @app.get("/ui", Action.OPEN)
    def dashboard(_http: HttpRequest) -> HttpResponse:
        return page


def _add_forwarding(app: App, forwarder: Forwarder) -> None:
    """Every request no route above takes (other paths, other methods on them) goes to the
    manager leader unchanged."""

    @app.fallback
    def forward(http: HttpRequest) -> HttpResponse:
        refuse_node_requests(http)
        answer = forwarder.forward(
            IncomingRequest(
                method=http.method,
                path_and_query=http.target,
                headers=tuple(http.headers),
                body=http.body,
                client_address=http.client_address,
            )
        )
        return HttpResponse(answer.status, answer.body, answer.headers)
