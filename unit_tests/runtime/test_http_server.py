"""``HttpServer`` and ``App`` over real sockets: what clients send (keep-alive, pipelining,
chunked bodies, ``Expect: 100-continue``), the bounds (headers, body, slow requests,
connections), and the error mapping."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import orjson
import pytest

from protocol.access import Action
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_api import App, json_response, request_params, server_limits
from runtime.http_server import HttpRequest, HttpResponse, HttpServer

WAIT_S = 10.0
LIMITS = replace(
    Limits(),
    http_connections_max=4,
    http_header_bytes_max=2048,
    request_bytes_max=4096,
    message_bytes_max=1024,
    key_bytes_max=256,
    http_request_read_timeout_s=0.5,
    http_keepalive_idle_s=5.0,
    http_idle_connection_s_max=2.0,
    http_shutdown_grace_s=2.0,
).validate()


def build_app() -> App:
    app = App("test", LIMITS)

    @app.post("/echo", Action.OPEN)
    def echo(http: HttpRequest) -> HttpResponse:
        return json_response({"params": request_params(http), "path": http.path}, 201)

    @app.get("/echo", Action.OPEN)
    def echo_get(http: HttpRequest) -> HttpResponse:
        return json_response({"params": request_params(http)})

    @app.get("/busy", Action.OPEN)
    def busy(_http: HttpRequest) -> HttpResponse:
        raise RaftQError(ErrorCode.BACKPRESSURE, "busy")

    @app.get("/bug", Action.OPEN)
    def bug(_http: HttpRequest) -> HttpResponse:
        raise ZeroDivisionError("boom")

    return app


@pytest.fixture
def server() -> Iterator[HttpServer]:
    served = HttpServer("127.0.0.1", 0, build_app().handle, server_limits(LIMITS))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    thread.join(WAIT_S)
    assert not thread.is_alive()


def connect(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)


def read_answer(sock: socket.socket, buffer: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One answer off a raw socket (``buffer`` keeps what belongs to the next one)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before an answer"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    buffer[:] = rest[length:]
    return status, headers, rest[:length]


def test_query_string_over_json_body_and_keep_alive(server: HttpServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=WAIT_S)
    for i in range(3):  # one connection, three requests
        conn.request("POST", f"/echo?b={i}&b=ignored", orjson.dumps({"a": 1, "b": "body"}))
        answer = conn.getresponse()
        assert answer.status == 201
        assert answer.getheader("Content-Type") == "application/json"
        assert orjson.loads(answer.read()) == {"params": {"a": 1, "b": str(i)}, "path": "/echo"}
    conn.close()


def test_pipelined_requests_are_answered_in_order(server: HttpServer) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"".join(f"GET /echo?n={i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(5))
        )
        buffer = bytearray()
        seen = [orjson.loads(read_answer(sock, buffer)[2])["params"]["n"] for _ in range(5)]
    assert seen == ["0", "1", "2", "3", "4"]


def test_chunked_body_and_expect_continue(server: HttpServer) -> None:
    body = orjson.dumps({"value": "x" * 100})
    with connect(server) as sock:
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
            + b"0\r\n\r\n"
        )
        status, _, answer = read_answer(sock, bytearray())
        assert status == 201 and orjson.loads(answer)["params"] == {"value": "x" * 100}

        sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        status, _, answer = read_answer(sock, bytearray())
        assert status == 201 and orjson.loads(answer)["params"] == {"value": "x" * 100}


def test_http_10_closes_unless_keep_alive_and_head_has_no_body(server: HttpServer) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /echo HTTP/1.0\r\n\r\n")
        status, headers, _ = read_answer(sock, bytearray())
        assert status == 200 and headers["connection"] == "close"
        assert sock.recv(1) == b""
    with connect(server) as sock:
        sock.sendall(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /echo?n=1 HTTP/1.1\r\n\r\n")
        buffer = bytearray()
        while b"\r\n\r\n" not in buffer:
            buffer += sock.recv(65536)
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        # Not routed to the GET handler (GET /logs may pop): 405, and no body follows.
        assert head.startswith(b"HTTP/1.1 405") and b"Content-Length: 0" in head
        buffer[:] = rest
        assert orjson.loads(read_answer(sock, buffer)[2]) == {"params": {"n": "1"}}


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"GARBAGE\r\n\r\n", 400, ErrorCode.MALFORMED_REQUEST),
        (b"GET /echo HTTP/2.0\r\n\r\n", 400, ErrorCode.MALFORMED_REQUEST),
        (b"GET /echo HTTP/1.1\r\nno colon\r\n\r\n", 400, ErrorCode.MALFORMED_REQUEST),
        (b"POST /echo HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400, ErrorCode.MALFORMED_REQUEST),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 413, ErrorCode.TOO_LARGE),
        (
            b"GET /echo HTTP/1.1\r\nX: " + b"a" * 3000 + b"\r\n\r\n",
            431,
            ErrorCode.HEADERS_TOO_LARGE,
        ),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", 201, None),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\n[]", 400, ErrorCode.MALFORMED_REQUEST),
        (b"GET /nowhere HTTP/1.1\r\n\r\n", 404, ErrorCode.NOT_FOUND),
        (b"DELETE /echo HTTP/1.1\r\n\r\n", 405, ErrorCode.METHOD_NOT_ALLOWED),
        (b"GET /busy HTTP/1.1\r\n\r\n", 429, ErrorCode.BACKPRESSURE),
        (b"GET /bug HTTP/1.1\r\n\r\n", 500, ErrorCode.INTERNAL),
    ],
)
def test_bad_requests_get_their_status_and_code(
    server: HttpServer, raw: bytes, status: int, code: ErrorCode | None
) -> None:
    with connect(server) as sock:
        sock.sendall(raw)
        got, headers, body = read_answer(sock, bytearray())
    assert got == status
    if code is not None:
        assert orjson.loads(body)["error_code"] == code.value
    if status in (429, 503):
        assert headers["retry-after"] == str(LIMITS.retry_after_s)


def test_a_request_that_trickles_in_is_cut_off(server: HttpServer) -> None:
    """A slowloris client: each byte arrives within the socket timeout, the whole request
    never does; the server answers 408 once ``http_request_read_timeout_s`` has passed."""
    with connect(server) as sock:
        started = time.monotonic()
        for byte in b"GET /echo HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa":
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)
            if time.monotonic() - started > WAIT_S:
                break
        status, _, body = read_answer(sock, bytearray())
    assert status == 408
    assert orjson.loads(body)["error_code"] == ErrorCode.REQUEST_TIMEOUT.value
    assert time.monotonic() - started < WAIT_S


def test_connections_beyond_the_bound_are_refused_and_the_rest_still_served(
    server: HttpServer,
) -> None:
    held = [connect(server) for _ in range(LIMITS.http_connections_max)]
    try:
        for sock in held:  # each is being served (one answer proves its thread runs)
            sock.sendall(b"GET /echo HTTP/1.1\r\n\r\n")
            assert read_answer(sock, bytearray())[0] == 200
        with connect(server) as extra:
            status, headers, body = read_answer(extra, bytearray())
        assert status == 503 and headers["connection"] == "close"
        assert orjson.loads(body)["error_code"] == ErrorCode.REFUSED.value
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + WAIT_S
    while True:  # the closed ones free their places (bounded wait)
        with connect(server) as sock:
            sock.sendall(b"GET /echo HTTP/1.1\r\n\r\n")
            if read_answer(sock, bytearray())[0] == 200:
                break
        assert time.monotonic() < deadline, "connections were not released"
        time.sleep(0.05)


def test_shutdown_lets_a_request_in_progress_finish() -> None:
    started, release = threading.Event(), threading.Event()
    app = App("slow", LIMITS)

    @app.get("/slow", Action.OPEN)
    def slow(_http: HttpRequest) -> HttpResponse:
        started.set()
        release.wait(WAIT_S)
        return json_response({"done": True})

    served = HttpServer("127.0.0.1", 0, app.handle, server_limits(LIMITS))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    with connect(served) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\n\r\n")
        assert started.wait(WAIT_S)
        stopper = threading.Thread(target=served.shutdown)
        stopper.start()
        release.set()
        status, headers, body = read_answer(sock, bytearray())
        stopper.join(WAIT_S)
    assert status == 200 and orjson.loads(body) == {"done": True}
    assert headers["connection"] == "close"
    thread.join(WAIT_S)
    assert not thread.is_alive()
    with pytest.raises(OSError):
        connect(served).close()


class _Chunks:
    """A streamed answer's iterable that records what happened to it."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        return next(self._chunks)

    def close(self) -> None:
        self.closed.set()


def streaming_server(chunks: _Chunks) -> tuple[HttpServer, threading.Thread]:
    app = App("test", LIMITS)

    @app.get("/stream", Action.OPEN)
    def stream(_http: HttpRequest) -> HttpResponse:
        return HttpResponse(200, headers=(("Content-Type", "text/event-stream"),), stream=chunks)

    served = HttpServer("127.0.0.1", 0, app.handle, server_limits(LIMITS))
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    return served, thread


def test_a_streamed_answer_is_sent_chunk_by_chunk_then_closed() -> None:
    chunks = _Chunks([b"data: 1\n\n", b"", b"data: 2\n\n"])
    served, thread = streaming_server(chunks)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=WAIT_S)
        connection.request("GET", "/stream")
        answer = connection.getresponse()
        assert answer.status == 200
        assert answer.getheader("Transfer-Encoding") == "chunked"
        assert answer.getheader("Connection") == "close"
        assert answer.read() == b"data: 1\n\ndata: 2\n\n"
        assert chunks.closed.wait(WAIT_S), "the stream's iterable was closed"
        connection.close()
    finally:
        served.shutdown()
        thread.join(WAIT_S)
