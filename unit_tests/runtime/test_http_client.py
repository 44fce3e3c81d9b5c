"""JsonHttpClient: an answer broken off mid-way is "no answer, outcome unknown", never an
internal error (found by the stress checker: a broker killed while answering a produce)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from protocol.access import Action
from protocol.deadline import Deadline
from protocol.limits import Limits
from protocol.node_auth import NodeCredential
from runtime.http_api import App, json_response, server_limits
from runtime.http_client import JsonHttpClient, NoAnswerError, PeerLink
from runtime.http_server import HttpRequest, HttpResponse, HttpServer


@pytest.fixture
def truncating_server() -> Iterator[str]:
    """Answers every request with headers promising 74 body bytes, sends 0, and closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.recv(65536)
                connection.sendall(
                    b"HTTP/1.1 201 CREATED\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 74\r\n\r\n"
                )

    thread = threading.Thread(target=serve)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


def test_a_broken_off_answer_is_an_unknown_outcome(truncating_server: str) -> None:
    client = JsonHttpClient(
        Limits(http_retries_max=2), PeerLink(NodeCredential.of("s" * 16, "manager-1"), None)
    )
    with pytest.raises(NoAnswerError) as caught:
        client.call("POST", f"{truncating_server}/logs", {"x": 1}, idempotent=True)
    assert caught.value.refused is False
    assert caught.value.status == 503


def test_nothing_is_sent_once_the_callers_deadline_has_passed(truncating_server: str) -> None:
    client = JsonHttpClient(Limits(), PeerLink(None, None))
    with pytest.raises(NoAnswerError) as gone:
        client.call("POST", truncating_server, {"a": 1}, deadline=Deadline(at_s=0.0))
    assert gone.value.refused and gone.value.code.proves_nothing_done
    client.close()


def test_a_peer_that_refuses_a_signed_request_is_named_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node of an older RaftQ refuses every signed request with its own 401 (it expects
    the static token): the calling node says so in its log, once a minute per peer, rather
    than failing silently."""
    app = App("peer", Limits())

    @app.get("/raft_status", Action.OPEN)
    def status(_http: HttpRequest) -> HttpResponse:  # what an older node answers
        body = {"error_code": 40101, "message": "this endpoint is for cluster nodes only"}
        return json_response(body, 401)

    server = HttpServer("127.0.0.1", 0, app.handle, server_limits(Limits()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    older = f"http://127.0.0.1:{server.port}"
    client = JsonHttpClient(Limits(), PeerLink(NodeCredential.of("s" * 16, "broker-1"), None))
    try:
        with caplog.at_level(logging.WARNING, logger="runtime.http_client"):
            for _ in range(3):
                assert client.call("GET", f"{older}/raft_status").status == 401
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1, warned  # once a minute per peer
        assert older in warned[0] and "older RaftQ" in warned[0]
        assert "Upgrading to signed node requests" in warned[0]
    finally:
        client.close()
        server.shutdown()
        thread.join(10)
