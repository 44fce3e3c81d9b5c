"""``HttpServer``: the HTTP/1.1 server of every RaftQ node (it replaced gunicorn + Flask).

Why our own: a produce of one message crossed gunicorn's gthread worker (a selector thread
hands each keep-alive request to a pool thread, then takes the connection back) and Flask's
request machinery, ~0.5-1 ms of Python per hop, and under load every extra thread wake-up
also waits for the GIL behind the Raft thread (ARCHITECTURE.md, "Performance"). This server
does only what RaftQ's JSON APIs need, in one pass:

- one thread per connection, which reads a request, calls the handler and writes the answer
  itself (no hand-off between threads); at most ``connections_max`` connections, a further
  one is answered 503 REFUSED and closed;
- the header block is found with one search and split once; bodies by ``Content-Length`` or
  chunked; ``Expect: 100-continue`` is honoured; keep-alive per HTTP/1.0 and 1.1;
- bounds: headers ``header_bytes_max`` (431), body ``body_bytes_max`` (413, before reading
  it), and the whole request must arrive within ``request_read_timeout_s`` of its first byte
  (408: a client that trickles bytes holds a thread that long at most); an idle keep-alive
  connection is closed after ``keepalive_idle_s``;
- TLS when given a context (``runtime.tls``): the handshake runs in the connection's thread
  (a slow client cannot stall the accept loop) and must finish within
  ``request_read_timeout_s``; a client that speaks plain HTTP to it is dropped.

Errors found while reading a request are answered here (the ``ErrorCode`` JSON shape) and
the connection closed; everything else is the ``handle`` callable's (``runtime.http_api``).
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

import orjson

from protocol.access import Principal
from protocol.errors import ErrorCode, RaftQError

_log = logging.getLogger(__name__)

_CRLF = b"\r\n"
_HEAD_END = b"\r\n\r\n"
_RECV_BYTES = 256 * 1024
_SEND_JOINED_BYTES_MAX = 256 * 1024
"""Up to this size the head and body go in one ``sendall`` (one packet for small answers)."""
_LISTEN_BACKLOG = 1024
_REASONS = {status.value: status.phrase for status in HTTPStatus}


@dataclass(frozen=True, slots=True)
class ServerLimits:
    connections_max: int
    header_bytes_max: int
    body_bytes_max: int
    request_read_timeout_s: float
    keepalive_idle_s: float
    shutdown_grace_s: float
    stream_send_timeout_s: float = 10.0
    """A streamed answer whose reader takes none of its bytes for this long is ended."""


@dataclass(slots=True)
class HttpRequest:
    method: str
    target: str
    """As the client sent it: path and query, still percent-encoded."""
    headers: list[tuple[str, str]]
    body: bytes = b""
    client_address: str | None = None
    peer_certified: bool = False
    """The caller showed a TLS certificate the listener's CA vouches for (mutual TLS)."""
    path: str = field(init=False)
    query_string: str = field(init=False)
    principal: Principal | None = field(default=None, init=False)
    """Who sent it, once the app authenticated it (``protocol.access``); ``None``: nobody."""
    path_params: dict[str, str] = field(default_factory=dict, init=False)
    """The ``{name}`` segments of the route that matched (``runtime.http_api.App``)."""
    received_s: float = field(default_factory=time.monotonic, init=False)
    """When it had arrived whole (monotonic): its handling time is measured from here."""

    def __post_init__(self) -> None:
        path, _, self.query_string = self.target.partition("?")
        self.path = unquote(path)

    def header(self, name: str) -> str | None:
        """The first header of that name (case-insensitive)."""
        wanted = name.lower()
        for key, value in self.headers:
            if key.lower() == wanted:
                return value
        return None

    def args(self) -> dict[str, str]:
        """The query string's parameters; the first value of a repeated name wins."""
        found: dict[str, str] = {}
        for name, value in parse_qsl(self.query_string, keep_blank_values=True):
            found.setdefault(name, value)
        return found


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    """Content-Type among them; the server adds Content-Length, Date and Connection."""
    stream: Iterable[bytes] | None = None
    """A streamed answer (``body`` unused): each item is sent as one chunk as soon as the
    iterable yields it (``Transfer-Encoding: chunked``), then the connection is closed.
    The iterable is closed when the reader goes away."""


Handle = Callable[[HttpRequest], HttpResponse]


class _BadRequestError(Exception):
    """The request cannot be read: answer ``error`` and close the connection."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = RaftQError(code, message)


class _ClientGoneError(Exception):
    """The connection closed or went idle between requests: close without an answer."""


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        handle: Handle,
        limits: ServerLimits,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._handle = handle
        self._limits = limits
        self._tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=_LISTEN_BACKLOG)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._in_flight = 0
        self._stopping = threading.Event()
        self._dates = _DateHeader()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def serve_forever(self) -> None:
        """Accept until ``shutdown``; each connection gets a thread of its own."""
        while not self._stopping.is_set():
            try:
                conn, address = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.01)  # e.g. EMFILE: let connections close, then go on
                continue
            with self._lock:
                full = len(self._connections) >= self._limits.connections_max
                if not full:
                    self._connections.add(conn)
            if full:
                self._refuse(conn)
                continue
            threading.Thread(
                target=self._serve_connection,
                args=(conn, address[0] if address else None),
                name="http-connection",
                daemon=True,
            ).start()

    def shutdown(self) -> None:
        """Stop accepting, let requests in progress finish (bounded by
        ``shutdown_grace_s``), then close every connection."""
        self._stopping.set()
        with contextlib.suppress(OSError):  # wakes a blocked accept() on Linux
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        until_s = time.monotonic() + self._limits.shutdown_grace_s
        while time.monotonic() < until_s:
            with self._lock:
                if self._in_flight == 0:
                    break
            time.sleep(0.01)
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # wakes its thread (blocked in recv), which closes it
            with contextlib.suppress(OSError):
                # The plain socket's shutdown, also for a TLS one: SSLSocket.shutdown would
                # drop the TLS state under the thread still reading it.
                socket.socket.shutdown(conn, socket.SHUT_RDWR)

    # --- one connection --------------------------------------------------------------------

    def _serve_connection(self, conn: socket.socket, client: str | None) -> None:
        buffer = bytearray()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            certified = False
            if self._tls is not None:
                conn = self._handshake(conn)
                certified = isinstance(conn, ssl.SSLSocket) and bool(conn.getpeercert())
            while not self._stopping.is_set():
                try:
                    request, keep_alive = self._read_request(conn, buffer, client, certified)
                except _ClientGoneError:
                    return
                except _BadRequestError as bad:
                    self._send(conn, _error_answer(bad.error), keep_alive=False)
                    return
                with self._lock:
                    self._in_flight += 1
                try:
                    response = self._handle(request)
                    if request.method == "HEAD":
                        _close_stream(response)
                        response = HttpResponse(response.status, b"", response.headers)
                    streamed = response.stream is not None
                    keep_alive = keep_alive and not streamed and not self._stopping.is_set()
                    self._send(conn, response, keep_alive)
                finally:
                    with self._lock:
                        self._in_flight -= 1
                if not keep_alive:
                    return
        except OSError:
            return  # reset, timed out, or a failed TLS handshake: nothing more to say on it
        finally:
            with self._lock:
                self._connections.discard(conn)
            _close(conn)

    def _handshake(self, conn: socket.socket) -> socket.socket:
        """The TLS connection over ``conn``, which it replaces in ``_connections`` (the
        wrapped socket owns the descriptor now); ``OSError`` if the handshake fails."""
        assert self._tls is not None
        wrapped = self._tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        with self._lock:
            self._connections.discard(conn)
            self._connections.add(wrapped)
        try:
            wrapped.settimeout(self._limits.request_read_timeout_s)
            wrapped.do_handshake()
        except OSError:
            with self._lock:
                self._connections.discard(wrapped)
            _close(wrapped)
            raise
        return wrapped

    def _read_request(
        self, conn: socket.socket, buffer: bytearray, client: str | None, certified: bool
    ) -> tuple[HttpRequest, bool]:
        limits = self._limits
        while buffer[:2] == _CRLF:  # RFC 9112 2.2: ignore empty lines before a request
            del buffer[:2]
        if not buffer:
            _receive(conn, buffer, limits.keepalive_idle_s, idle=True)
        until_s = time.monotonic() + limits.request_read_timeout_s
        while (end := buffer.find(_HEAD_END)) < 0:
            if len(buffer) > limits.header_bytes_max:
                raise _BadRequestError(ErrorCode.HEADERS_TOO_LARGE, "request headers too large")
            _receive(conn, buffer, _left(until_s), idle=False)
        if end > limits.header_bytes_max:
            raise _BadRequestError(ErrorCode.HEADERS_TOO_LARGE, "request headers too large")
        head = bytes(buffer[:end])
        del buffer[: end + 4]
        method, target, version, headers = _parse_head(head)
        keep_alive = _keep_alive(version, headers)
        body = self._read_body(conn, buffer, headers, until_s)
        return HttpRequest(method, target, headers, body, client, certified), keep_alive

    def _read_body(
        self,
        conn: socket.socket,
        buffer: bytearray,
        headers: list[tuple[str, str]],
        until_s: float,
    ) -> bytes:
        length_text = chunked = expect = None
        for name, value in headers:
            lowered = name.lower()
            if lowered == "content-length":
                if length_text is not None and length_text != value:
                    raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "two Content-Lengths")
                length_text = value
            elif lowered == "transfer-encoding":
                chunked = value
            elif lowered == "expect":
                expect = value.lower()
        if chunked is not None:
            if length_text is not None or chunked.lower() != "chunked":
                raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "unsupported Transfer-Encoding")
            self._continue_if_expected(conn, expect)
            return self._read_chunked(conn, buffer, until_s)
        if length_text is None:
            return b""
        if not length_text.isdigit():
            raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "bad Content-Length")
        length = int(length_text)
        if length > self._limits.body_bytes_max:
            raise _BadRequestError(
                ErrorCode.TOO_LARGE,
                f"request body of {length} bytes; at most {self._limits.body_bytes_max}",
            )
        if length and not buffer:
            self._continue_if_expected(conn, expect)
        while len(buffer) < length:
            _receive(conn, buffer, _left(until_s), idle=False)
        body = bytes(buffer[:length])
        del buffer[:length]
        return body

    def _read_chunked(self, conn: socket.socket, buffer: bytearray, until_s: float) -> bytes:
        body = bytearray()
        while True:
            while (line_end := buffer.find(_CRLF)) < 0:
                if len(buffer) > self._limits.header_bytes_max:
                    raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "bad chunk header")
                _receive(conn, buffer, _left(until_s), idle=False)
            size_text = bytes(buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "bad chunk size") from None
            del buffer[: line_end + 2]
            if len(body) + size > self._limits.body_bytes_max:
                raise _BadRequestError(ErrorCode.TOO_LARGE, "request body too large")
            if size == 0:  # the last chunk; trailers (ignored) end with an empty line
                while (trailer_end := buffer.find(_CRLF)) != 0:
                    if trailer_end > 0:
                        del buffer[: trailer_end + 2]
                        continue
                    _receive(conn, buffer, _left(until_s), idle=False)
                del buffer[:2]
                return bytes(body)
            while len(buffer) < size + 2:
                _receive(conn, buffer, _left(until_s), idle=False)
            body += buffer[:size]
            del buffer[: size + 2]

    def _continue_if_expected(self, conn: socket.socket, expect: str | None) -> None:
        if expect == "100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _send(self, conn: socket.socket, response: HttpResponse, keep_alive: bool) -> None:
        if response.stream is not None:
            self._send_stream(conn, response, response.stream)
            return
        reason = _REASONS.get(response.status, "")
        lines = [f"HTTP/1.1 {response.status} {reason}", f"Date: {self._dates.now()}"]
        lines.extend(f"{name}: {value}" for name, value in response.headers)
        lines.append(f"Content-Length: {len(response.body)}")
        if not keep_alive:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if len(response.body) <= _SEND_JOINED_BYTES_MAX:
            conn.sendall(head + response.body)
        else:
            conn.sendall(head)
            conn.sendall(response.body)

    def _send_stream(
        self, conn: socket.socket, response: HttpResponse, chunks: Iterable[bytes]
    ) -> None:
        """The head, then each chunk as it comes; ``OSError`` when the reader is gone or
        took nothing for ``stream_send_timeout_s`` (the caller closes the connection)."""
        reason = _REASONS.get(response.status, "")
        lines = [f"HTTP/1.1 {response.status} {reason}", f"Date: {self._dates.now()}"]
        lines.extend(f"{name}: {value}" for name, value in response.headers)
        lines += ["Transfer-Encoding: chunked", "Connection: close", "Cache-Control: no-store"]
        conn.settimeout(self._limits.stream_send_timeout_s)
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            for chunk in chunks:
                if chunk:
                    conn.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            conn.sendall(b"0\r\n\r\n")
        finally:
            _close_stream(response)

    def _refuse(self, conn: socket.socket) -> None:
        # A TLS client could not read a plain answer: it sees the connection close before
        # its handshake ends, which also proves nothing was done.
        if self._tls is None:
            error = RaftQError(ErrorCode.REFUSED, "too many connections to this node; retry later")
            with contextlib.suppress(OSError):
                conn.settimeout(1.0)
                self._send(conn, _error_answer(error), keep_alive=False)
        _close(conn)


def _receive(conn: socket.socket, buffer: bytearray, timeout_s: float, *, idle: bool) -> None:
    """Append what arrives within ``timeout_s``. Between requests (``idle``) a timeout or a
    closed connection ends the connection quietly; within a request they answer 408 / end."""
    if timeout_s <= 0:
        raise _BadRequestError(ErrorCode.REQUEST_TIMEOUT, "the request came too slowly")
    conn.settimeout(timeout_s)
    try:
        chunk = conn.recv(_RECV_BYTES)
    except TimeoutError:
        if idle:
            raise _ClientGoneError from None
        raise _BadRequestError(ErrorCode.REQUEST_TIMEOUT, "the request came too slowly") from None
    if not chunk:
        raise _ClientGoneError
    buffer += chunk


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1].startswith(("/", "*")):
        raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "bad request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, f"unsupported {version!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequestError(ErrorCode.MALFORMED_REQUEST, "bad header line")
        headers.append((name, value.strip()))
    return method, target, version, headers


def _keep_alive(version: str, headers: list[tuple[str, str]]) -> bool:
    tokens = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


def _left(until_s: float) -> float:
    return until_s - time.monotonic()


def _error_answer(error: RaftQError) -> HttpResponse:
    return HttpResponse(
        error.status, orjson.dumps(error.to_json()), (("Content-Type", "application/json"),)
    )


def _close_stream(response: HttpResponse) -> None:
    """Close a streamed answer's iterable, if it can be: what it holds is given back now,
    not at garbage collection (a generator's ``finally``, a broker's count of streams)."""
    close = getattr(response.stream, "close", None)
    if close is not None:
        close()


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.close()


class _DateHeader:
    """The ``Date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._text = email.utils.formatdate(second, usegmt=True)
            self._second = second
        return self._text
