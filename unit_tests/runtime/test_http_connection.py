"""``HttpConnections`` against real sockets: keep-alive reuse, a peer that closed an idle
connection, and the two failure kinds a retry decision rests on (nothing sent / answer lost)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest

from protocol.access import Action
from protocol.limits import Limits
from runtime.http_api import App, json_response, request_params, server_limits
from runtime.http_connection import AnswerLostError, HttpConnections, NotSentError
from runtime.http_server import HttpRequest, HttpResponse, HttpServer
from unit_tests.ports import free_port

WAIT_S = 10.0
LIMITS = replace(Limits(), http_keepalive_idle_s=0.3, http_idle_connection_s_max=0.2)


@pytest.fixture
def server() -> Iterator[HttpServer]:
    app = App("echo", LIMITS)

    @app.post("/echo", Action.OPEN)
    def echo(http: HttpRequest) -> HttpResponse:
        return json_response({"params": request_params(http)}, 201)

    @app.get("/sleep", Action.OPEN)
    def sleep(_http: HttpRequest) -> HttpResponse:
        time.sleep(1.0)
        return json_response({})

    served = HttpServer("127.0.0.1", 0, app.handle, server_limits(LIMITS))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    thread.join(WAIT_S)


def url(server: HttpServer) -> str:
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture
def pool() -> Iterator[HttpConnections]:
    connections = HttpConnections(idle_per_peer_max=4, idle_s_max=WAIT_S)
    yield connections
    connections.close()


def call(
    pool: HttpConnections, base: str, method: str = "POST", target: str = "/echo?a=1"
) -> tuple[int, object]:
    answer = pool.request(
        method,
        base,
        target,
        orjson.dumps({"b": 2}) if method == "POST" else None,
        [("Content-Type", "application/json")],
        connect_timeout_s=WAIT_S,
        read_timeout_s=WAIT_S,
    )
    return answer.status, orjson.loads(answer.body) if answer.body else None


def test_answers_come_back_over_one_kept_connection(
    server: HttpServer, pool: HttpConnections
) -> None:
    base = url(server)
    connects = count_connects(pool)
    for _ in range(5):
        assert call(pool, base) == (201, {"params": {"a": "1", "b": 2}})
    assert connects() == 1


def test_a_connection_the_peer_closed_while_idle_is_not_reused(
    server: HttpServer, pool: HttpConnections
) -> None:
    """``pool`` keeps idle connections longer (``WAIT_S``) than the server (0.3 s)."""
    connects = count_connects(pool)
    assert call(pool, url(server))[0] == 201
    deadline = time.monotonic() + WAIT_S
    while server.connection_count:  # the server closes it after http_keepalive_idle_s
        assert time.monotonic() < deadline, "the server kept an idle connection"
        time.sleep(0.05)
    assert call(pool, url(server))[0] == 201  # not an error: the closed one was dropped
    assert connects() == 2


def test_nothing_sent_when_nobody_listens(pool: HttpConnections) -> None:
    with pytest.raises(NotSentError):
        call(pool, f"http://127.0.0.1:{free_port()}")


def test_a_late_answer_is_lost_and_says_it_timed_out(
    server: HttpServer, pool: HttpConnections
) -> None:
    with pytest.raises(AnswerLostError) as raised:
        pool.request(
            "GET", url(server), "/sleep", None, [], connect_timeout_s=1.0, read_timeout_s=0.2
        )
    assert raised.value.timed_out


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (b"", None),  # closed before answering
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", None),  # cut off mid-body
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", 201),
        (b'HTTP/1.0 200 OK\r\n\r\n{"to": "the end"}', 200),  # no length: until close
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204),
    ],
)
def test_answers_as_peers_may_send_them(
    reply: bytes, expected: int | None, pool: HttpConnections
) -> None:
    with one_shot_peer(lambda _request: reply) as base:
        if expected is None:
            with pytest.raises(AnswerLostError) as raised:
                call(pool, base)
            assert not raised.value.timed_out
        else:
            assert call(pool, base)[0] == expected


def count_connects(pool: HttpConnections) -> Callable[[], int]:
    """Counts the new connections ``pool`` makes from now on."""
    made = [0]
    connect = pool._connect

    def counting(*args: Any) -> socket.socket:
        made[0] += 1
        return connect(*args)

    pool._connect = counting  # type: ignore[method-assign,assignment]
    return lambda: made[0]


class one_shot_peer:  # noqa: N801 (used as a context manager)
    """A listener that answers the first request with fixed bytes, then closes."""

    def __init__(self, reply: Callable[[bytes], bytes]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._reply = reply
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __exit__(self, *_exc: object) -> None:
        self._thread.join(WAIT_S)
        self._listener.close()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(WAIT_S)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(self._reply(data))
