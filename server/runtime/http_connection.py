"""``HttpConnections``: keep-alive HTTP/1.1 connections between RaftQ's own nodes.

Why not urllib3: a produce through the load balancer crosses two client hops (LB -> manager
-> broker), and py-spy showed urllib3 and ``http.client`` (URL parsing, header objects,
``email`` header parsing) taking ~65% of the manager's CPU per request, more than handling
the request itself. Its peers are RaftQ's own servers (``runtime.http_server``), which always
answer with ``Content-Length``, so this client does only that: one ``sendall`` of the request,
the answer's head found with one search, its body by ``Content-Length`` (or to the end of
the connection when it has none).

What the caller learns about a failure is exact, because a retry elsewhere depends on it:
- ``NotSentError``: the peer cannot have acted: the connection could not be made (refused,
  connect timeout), or the request could not be written whole (a server acts only on a
  complete request);
- ``AnswerLostError``: the request went out and no complete answer came (read timeout, the
  connection closed or reset): the peer may have acted.

An idle connection is reused only if it is younger than ``idle_s_max`` and has nothing to
read (a peer that closed it has left an end-of-file there). ``https://`` peers are reached
over TLS with the given context (``runtime.tls``); a failed handshake (e.g. a certificate
the context does not trust) is a ``NotSentError``: nothing was sent. Thread-safe.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

_HEAD_END = b"\r\n\r\n"
_RECV_BYTES = 256 * 1024
_HEAD_BYTES_MAX = 64 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})


class NoAnswerFromPeerError(Exception):
    """No answer came: one of the two kinds below."""


class NotSentError(NoAnswerFromPeerError):
    """The peer cannot have acted on the request."""


class AnswerLostError(NoAnswerFromPeerError):
    """The request was sent; no complete answer came. ``timed_out``: the wait ran out."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True, slots=True)
class RawAnswer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


@dataclass(slots=True)
class _Idle:
    sock: socket.socket
    since_s: float


@dataclass(frozen=True, slots=True)
class _Peer:
    host: str
    port: int
    tls: bool


class HttpConnections:
    def __init__(
        self, idle_per_peer_max: int, idle_s_max: float, tls: ssl.SSLContext | None = None
    ) -> None:
        """``tls``: how ``https://`` peers are checked (default: the system's CAs)."""
        self._idle_per_peer_max = idle_per_peer_max
        self._idle_s_max = idle_s_max
        self._tls = tls
        self._lock = threading.Lock()
        self._idle: dict[_Peer, list[_Idle]] = {}
        self._peers: dict[str, _Peer] = {}

    def request(
        self,
        method: str,
        base_url: str,
        target: str,
        body: bytes | None,
        headers: Iterable[tuple[str, str]],
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
    ) -> RawAnswer:
        """``method base_url+target``; the answer whatever its status."""
        peer = self._peer(base_url)
        message = _request_bytes(method, target, peer, body, headers)
        sock = self._take(peer, connect_timeout_s)
        try:
            try:
                sock.settimeout(read_timeout_s)
                sock.sendall(message)
            except OSError as exc:
                raise NotSentError(f"the request could not be written: {exc}") from exc
            answer, keep = _read_answer(sock, method, time.monotonic() + read_timeout_s)
        except BaseException:
            _close(sock)
            raise
        if keep:
            self._give_back(peer, sock)
        else:
            _close(sock)
        return answer

    def close(self) -> None:
        with self._lock:
            idle = [entry for entries in self._idle.values() for entry in entries]
            self._idle.clear()
        for entry in idle:
            _close(entry.sock)

    def _peer(self, base_url: str) -> _Peer:
        peer = self._peers.get(base_url)
        if peer is None:
            parts = urlsplit(base_url)
            if parts.scheme not in ("http", "https") or parts.hostname is None:
                raise NotSentError(f"not an http:// or https:// URL: {base_url!r}")
            tls = parts.scheme == "https"
            try:
                port = parts.port
            except ValueError as exc:
                raise NotSentError(f"not a port in {base_url!r}: {exc}") from None
            peer = _Peer(parts.hostname, port or (443 if tls else 80), tls)
            self._peers[base_url] = peer
        return peer

    def _take(self, peer: _Peer, connect_timeout_s: float) -> socket.socket:
        now_s = time.monotonic()
        while True:
            with self._lock:
                entries = self._idle.get(peer)
                entry = entries.pop() if entries else None
            if entry is None:
                break
            if now_s - entry.since_s < self._idle_s_max and _still_open(entry.sock):
                return entry.sock
            _close(entry.sock)
        try:
            sock = self._connect(peer, connect_timeout_s)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA refuses
            raise NotSentError(f"cannot connect to {peer.host!r}:{peer.port}: {exc}") from exc
        return sock

    def _connect(self, peer: _Peer, timeout_s: float) -> socket.socket:
        sock = socket.create_connection((peer.host, peer.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not peer.tls:
            return sock
        if self._tls is None:
            self._tls = ssl.create_default_context()
        try:  # the handshake, within the connect timeout set above
            return self._tls.wrap_socket(sock, server_hostname=peer.host)
        except BaseException:
            _close(sock)
            raise

    def _give_back(self, peer: _Peer, sock: socket.socket) -> None:
        with self._lock:
            entries = self._idle.setdefault(peer, [])
            if len(entries) < self._idle_per_peer_max:
                entries.append(_Idle(sock, time.monotonic()))
                return
        _close(sock)


def _request_bytes(
    method: str,
    target: str,
    peer: _Peer,
    body: bytes | None,
    headers: Iterable[tuple[str, str]],
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {peer.host}:{peer.port}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if body is None else head + body


def _read_answer(sock: socket.socket, method: str, until_s: float) -> tuple[RawAnswer, bool]:
    """The answer, and whether the connection may carry another request."""
    buffer = bytearray()
    while True:  # skip interim (1xx) answers
        while (end := buffer.find(_HEAD_END)) < 0:
            if len(buffer) > _HEAD_BYTES_MAX:
                raise AnswerLostError("the answer's head is too large", timed_out=False)
            _receive(sock, buffer, until_s)
        status, headers, version = _parse_head(bytes(buffer[:end]))
        del buffer[: end + 4]
        if status >= 200:
            break
    tokens = {
        t.strip().lower() for n, v in headers if n.lower() == "connection" for t in v.split(",")
    }
    keep = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    length_text = next((v for n, v in headers if n.lower() == "content-length"), None)
    if method == "HEAD" or status in _NO_BODY_STATUSES:
        length = 0
    elif length_text is not None and length_text.isdigit():
        length = int(length_text)
    elif any(n.lower() == "transfer-encoding" for n, _ in headers):
        raise AnswerLostError("a chunked answer (RaftQ's servers never send one)", timed_out=False)
    else:  # the body runs to the end of the connection
        with contextlib.suppress(_EndOfAnswer):
            while True:
                _receive(sock, buffer, until_s, eof_ends=True)
        return RawAnswer(status, headers, bytes(buffer)), False
    while len(buffer) < length:
        _receive(sock, buffer, until_s)
    return RawAnswer(status, headers, bytes(buffer[:length])), keep and len(buffer) == length


class _EndOfAnswer(Exception):  # noqa: N818 (a signal, not an error)
    pass


def _receive(
    sock: socket.socket, buffer: bytearray, until_s: float, *, eof_ends: bool = False
) -> None:
    left_s = until_s - time.monotonic()
    if left_s <= 0:
        raise AnswerLostError("no complete answer in time", timed_out=True)
    sock.settimeout(left_s)
    try:
        chunk = sock.recv(_RECV_BYTES)
    except TimeoutError:
        raise AnswerLostError("no complete answer in time", timed_out=True) from None
    except OSError as exc:
        raise AnswerLostError(f"the connection broke: {exc}", timed_out=False) from exc
    if not chunk:
        if eof_ends:
            raise _EndOfAnswer
        raise AnswerLostError("the peer closed the connection before answering", timed_out=False)
    buffer += chunk


def _parse_head(head: bytes) -> tuple[int, list[tuple[str, str]], str]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit() or not parts[0].startswith("HTTP/1."):
        raise AnswerLostError(f"not an HTTP answer: {lines[0][:80]!r}", timed_out=False)
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return int(parts[1]), headers, parts[0]


def _still_open(sock: socket.socket) -> bool:
    """Nothing to read on an idle connection: an end-of-file (or stray bytes) means it is
    not reusable."""
    try:
        sock.settimeout(0)  # with a timeout set, recv would first wait that long for data
        if isinstance(sock, ssl.SSLSocket):
            # TLS has no peek; a byte read here would be a stray one, and the connection is
            # dropped then anyway. A record that is not data (a session ticket) is consumed
            # and reads as "nothing there".
            sock.recv(1)
        else:
            sock.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, ssl.SSLWantReadError):
        return True  # nothing there: still open
    except OSError:
        return False
    return False


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()
