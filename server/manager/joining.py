"""A manager being added waits to be added (issue 23, hole 2).

The leader adds a manager only once that manager proved its address
(``manager.address_proof``), so a new manager's process starts first. Its start-up peer
check finds that no running peer lists it yet (``peer_check.check_peers_agree``); then,
before it builds its registry or starts its Raft node, it serves only what the add needs
(``/``, who leads: nobody here, the address proof, its API document) and asks its peers
every ``manager_join_poll_s`` whether they list it. Once one does, it starts as any
manager does. Its Raft node therefore never campaigns alone with terms that would unseat
the leader when it joins.

Threads: ``wait_until_listed`` runs on the server's "start" thread
(``runtime.command_line.run_server``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from manager.address_proof import AddressProver, add_proof_route
from manager.config import ManagerConfig
from manager.peer_check import listed_by_a_peer
from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.openapi import Node, api_document
from runtime.command_line import Prelude
from runtime.http_api import App, add_document_route, json_response
from runtime.http_client import JsonHttpClient, PeerLink
from runtime.http_server import HttpRequest, HttpResponse

_log = logging.getLogger(__name__)
WAITING_LOG_PERIOD_S = 30.0
"""How often a waiting manager says so in its log."""


def joining_prelude(config: ManagerConfig) -> Prelude:
    """What a manager that no running peer lists serves until one does."""
    app = App("manager", config.limits)
    _add_routes(app, config)
    return Prelude(app, lambda stopping: wait_until_listed(config, stopping))


def _add_routes(app: App, config: ManagerConfig) -> None:
    @app.get("/", Action.OPEN)
    def health(_http: HttpRequest) -> HttpResponse:
        return json_response({"status": "ok", "role": "manager", "id": config.manager_id})

    @app.get("/raft_status", Action.OPEN)
    def raft_status(_http: HttpRequest) -> HttpResponse:
        return json_response(
            {
                "id": config.manager_id,
                "is_leader": False,
                "state": "joining",
                "leader_address": None,
                "term": 0,
            }
        )

    add_proof_route(app, AddressProver(config), config.limits)
    add_document_route(app, api_document(Node.MANAGER))

    @app.fallback
    def waiting(_http: HttpRequest) -> HttpResponse:
        raise RaftQError(
            ErrorCode.NOT_LEADER,
            f"manager {config.manager_id} waits to be added to the managers (raftq manager "
            "add, or POST /managers with an admin key): it serves nothing else yet",
        )


def wait_until_listed(config: ManagerConfig, stopping: threading.Event) -> bool:
    """Ask the peers until one lists this manager (True) or the manager stops (False)."""
    limits = config.limits
    client = JsonHttpClient(
        replace(limits, http_retries_max=1),
        PeerLink.of(config.secret, config.tls, f"manager-{config.manager_id}"),
    )
    next_log_s = time.monotonic()
    try:
        while not stopping.is_set():
            if listed_by_a_peer(config, client):
                _log.info("manager %d was added: starting", config.manager_id)
                return True
            if time.monotonic() >= next_log_s:
                _log.info(
                    "manager %d waits to be added: no running manager lists it yet "
                    "(raftq manager add, or POST /managers with an admin key)",
                    config.manager_id,
                )
                next_log_s = time.monotonic() + WAITING_LOG_PERIOD_S
            stopping.wait(limits.manager_join_poll_s)
        return False
    finally:
        client.close()
