"""A scripted stand-in for the load balancer: a Flask app on a thread that answers each
request from a per-path script (then a default) and records what it received."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from flask import Flask, Response, jsonify, request
from werkzeug.serving import make_server

from protocol.node_auth import SIGNATURE_HEADER

Handler = Callable[[dict[str, object]], tuple[int, object]]


@dataclass(frozen=True)
class Reply:
    status: int
    body: object
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    params: dict[str, object]
    authorization: str | None = None
    node_signature: str | None = None
    """The ``X-RaftQ-Node-Auth`` header, if any."""
    headers: dict[str, str] = field(default_factory=dict)
    """Every header, names in lower case."""
    target: str = ""
    """Path and query as sent."""
    body: bytes = b""


class FakeService:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.scripts: dict[tuple[str, str], deque[Reply]] = {}
        self.defaults: dict[tuple[str, str], Handler] = {}
        self._lock = threading.Lock()
        app = Flask("fake_service")
        app.add_url_rule(
            "/<path:path>", "any", self._handle, methods=["GET", "POST", "PUT", "DELETE"]
        )
        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        # A short poll interval: stop() waits for it (several fakes per test stop in turn).
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def script(self, method: str, path: str, *replies: Reply) -> None:
        self.scripts.setdefault((method, path), deque()).extend(replies)

    def default(self, method: str, path: str, handler: Handler) -> None:
        self.defaults[(method, path)] = handler

    def authorizations(self) -> set[str | None]:
        """Every ``Authorization`` header received (``None``: a request without one)."""
        return {r.authorization for r in self.received}

    def signed(self, method: str, path: str) -> list[Received]:
        return [r for r in self.received if (r.method, r.path) == (method, path)]

    def calls(self, method: str, path: str) -> list[dict[str, object]]:
        return [r.params for r in self.received if (r.method, r.path) == (method, path)]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def _handle(self, path: str) -> Response:
        params: dict[str, object] = dict(request.get_json(silent=True) or {})
        params.update(request.args.items())
        key = (request.method, "/" + path)
        with self._lock:
            authorization = request.headers.get("Authorization")
            node = request.headers.get(SIGNATURE_HEADER)
            headers = {name.lower(): value for name, value in request.headers.items()}
            target = request.full_path.removesuffix("?")
            self.received.append(
                Received(
                    request.method,
                    "/" + path,
                    params,
                    authorization,
                    node,
                    headers,
                    target,
                    request.get_data(),
                )
            )
            queue = self.scripts.get(key)
            reply = queue.popleft() if queue else None
        if reply is None:
            handler = self.defaults.get(key)
            if handler is None:
                return _reply(Reply(404, {"error_code": 40405, "message": "not scripted"}))
            status, body = handler(params)
            reply = Reply(status, body)
        time.sleep(reply.delay_s)
        return _reply(reply)


def _reply(reply: Reply) -> Response:
    response = jsonify(reply.body)
    response.status_code = reply.status
    for name, value in reply.headers.items():
        response.headers[name] = value
    return response
