"""A fake manager for load-balancer tests: a small Flask app served on a thread.

It answers ``/raft_status`` from settable fields and echoes every other request (method,
path, query, body, headers) so a test can see exactly what the load balancer forwarded.
"""

from __future__ import annotations

import json
import threading
import time

from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

REQUESTS_KEPT_MAX = 1_000


class FakeManager:
    def __init__(self, manager_id: int) -> None:
        self.manager_id = manager_id
        self.is_leader = False
        self.term = 0
        self.leader_address: str | None = None
        self.hand_over_to: FakeManager | None = None
        """When set, the next data request deposes this manager in favour of that one and
        gets 503 NOT_LEADER, as if the election happened just before the request arrived."""
        self.seen: list[tuple[str, str]] = []
        """(method, full path) of each data request received, oldest first."""
        self._lock = threading.Lock()
        self._server = make_server("127.0.0.1", 0, self._build_app(), threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"fake-manager-{manager_id}", daemon=True
        )
        self._thread.start()

    def lead(self, term: int) -> None:
        self.is_leader, self.term, self.leader_address = True, term, self.url

    def follow(self, leader: FakeManager | None, term: int) -> None:
        self.is_leader, self.term = False, term
        self.leader_address = None if leader is None else leader.url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def _build_app(self) -> Flask:
        app = Flask(f"fake_manager_{self.manager_id}")

        @app.get("/raft_status")
        def raft_status() -> Response:
            return jsonify(
                id=self.manager_id,
                is_leader=self.is_leader,
                term=self.term,
                leader_address=self.leader_address,
            )

        @app.route(
            "/<path:path>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], strict_slashes=False
        )
        @app.route("/", methods=["POST", "PUT", "DELETE"])
        def echo(path: str = "") -> Response:
            return self._echo()

        return app

    def _echo(self) -> Response:
        with self._lock:
            if len(self.seen) < REQUESTS_KEPT_MAX:
                self.seen.append((request.method, request.full_path.rstrip("?")))
            successor, self.hand_over_to = self.hand_over_to, None
        if successor is not None:
            successor.lead(self.term + 1)
            self.follow(successor, self.term + 1)
        if not self.is_leader:
            body = {"error_code": 50302, "message": "not the leader"}
            return Response(_json(body), status=503, mimetype="application/json")
        if request.path == "/slow":
            time.sleep(float(request.args.get("sleep_s", "3")))
        status = int(request.headers.get("X-Reply-Status", "200"))
        body = {
            "manager": self.url,
            "method": request.method,
            "path": request.path,
            "query": request.query_string.decode(),
            "body": request.get_data(as_text=True),
            "headers": {k.lower(): v for k, v in request.headers.items()},
        }
        response = Response(_json(body), status=status, mimetype="application/json")
        response.headers["X-Echo"] = "yes"
        response.headers["Retry-After"] = "7"
        return response


def _json(body: object) -> str:
    return json.dumps(body)
