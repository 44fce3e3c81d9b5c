"""JSON over HTTP between components, with bounded timeouts and retries.

Only a call that is safe to repeat is retried, and only on errors that prove nothing was
processed (the connection was never made) unless the caller says the call is idempotent.

Built on ``runtime.http_connection`` (keep-alive connections, one pass over each answer)
and orjson: ``requests``, and then urllib3, cost more CPU per call than the handler they
call, and every produce through the load balancer crosses two of these hops.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import orjson

from protocol.deadline import EPOCH_HEADER as EPOCH_DEADLINE_HEADER
from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.node_auth import (
    NODE_REFUSAL,
    SIGNATURE_HEADER,
    NodeCredential,
    new_signature_nonce,
)
from runtime.http_connection import HttpConnections, NoAnswerFromPeerError, NotSentError
from runtime.tls import TlsFiles, client_context

_JSON_HEADER = ("Content-Type", "application/json")
_log = logging.getLogger(__name__)


class NoAnswerError(RaftQError):
    """No answer came. ``refused`` says the connection was never made (refused or timed out
    while connecting), which proves the request was not processed: ``REFUSED`` then, else
    ``UNAVAILABLE`` (outcome unknown)."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(ErrorCode.REFUSED if refused else ErrorCode.UNAVAILABLE, message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    body: object
    headers: dict[str, str]


def nothing_was_sent(exc: BaseException) -> bool:
    """True when the peer cannot have acted: the connection was never made, or the request
    could not be written whole (``runtime.http_connection``)."""
    return isinstance(exc, NotSentError)


@dataclass(frozen=True, slots=True)
class PeerLink:
    """How a node calls its peers, built once from its config."""

    credential: NodeCredential | None
    """Signs every call (``protocol.node_auth``): the peers' internal endpoints answer only
    nodes. ``None``: no credential at all (for addresses not yet proven to be the
    cluster's, ``without_credential``)."""
    tls: ssl.SSLContext | None
    """How ``https://`` peers are checked (``runtime.tls.client_context``); ``None``: the
    system's CAs."""

    @classmethod
    def of(cls, secret: str, tls: TlsFiles, node: str) -> PeerLink:
        """A node's link from its config: its key from the cluster secret and its name
        (``manager-1``, ``broker-3``, ``tool-...``), its TLS files."""
        return cls(NodeCredential.of(secret, node), client_context(tls))

    def without_credential(self) -> PeerLink:
        """The same TLS checks, no credential: what a node calls an address with that it
        may not trust with one (a manager it is asked to add, before it proved itself)."""
        return PeerLink(None, self.tls)


def connections(limits: Limits, tls: ssl.SSLContext | None) -> HttpConnections:
    """The keep-alive connections of one node to its peers."""
    return HttpConnections(
        limits.http_idle_connections_per_peer_max, limits.http_idle_connection_s_max, tls
    )


class JsonHttpClient:
    """One per component; thread-safe."""

    def __init__(self, limits: Limits, link: PeerLink, *, timeout_s: float | None = None) -> None:
        self._limits = limits
        self._timeout_s = limits.http_timeout_s if timeout_s is None else timeout_s
        self._connections = connections(limits, link.tls)
        self._credential = link.credential
        self._refusals = _RefusalLog()

    def call(
        self,
        method: str,
        url: str,
        body: object | None = None,
        *,
        params: dict[str, str] | None = None,
        idempotent: bool = False,
        timeout_s: float | None = None,
        deadline: Deadline | None = None,
    ) -> HttpAnswer:
        """Send and return the answer whatever its status; raise ``NoAnswerError`` when no
        answer came. With a ``deadline`` (the caller's caller's) nothing is sent once it has
        passed, each wait is cut to what is left, and the peer is told what is left."""
        data = None if body is None else orjson.dumps(body)
        base, path = _split(url)
        target = f"{path}?{urlencode(params)}" if params else path
        read_s = timeout_s or self._timeout_s
        attempts = self._limits.http_retries_max
        last_error: NoAnswerFromPeerError | None = None
        for attempt in range(attempts):
            now_s = time.monotonic()
            headers = self._signed(method, base, target, data)
            if data is not None:
                headers.append(_JSON_HEADER)
            if deadline is not None:
                if deadline.expired(now_s):
                    raise NoAnswerError(
                        f"{method} {url} not sent: its caller's deadline passed", refused=True
                    )
                margin_s = self._limits.deadline_reply_margin_s
                headers.append((DEADLINE_HEADER, deadline.header_value(now_s, margin_s)))
                wall_ms = int(time.time() * 1000)
                epoch = deadline.epoch_header_value(now_s, wall_ms, margin_s)
                headers.append((EPOCH_DEADLINE_HEADER, epoch))
            try:
                response = self._connections.request(
                    method,
                    base,
                    target,
                    data,
                    headers,
                    connect_timeout_s=self._limits.http_connect_timeout_s,
                    read_timeout_s=read_s if deadline is None else deadline.bound(read_s, now_s),
                )
            except NoAnswerFromPeerError as exc:
                # Never connected: nothing was sent. Otherwise (a timeout, or the answer
                # broken off mid-way because the peer died while answering) the request
                # may have been processed.
                last_error = exc
                if not (idempotent or nothing_was_sent(exc)) or attempt + 1 == attempts:
                    break
                time.sleep(random.uniform(0, self._limits.http_retry_backoff_s_max))
                continue
            answer = HttpAnswer(
                response.status, _json_or_text(response.body), dict(response.headers)
            )
            if answer.status == 401 and self._credential is not None:
                self._refusals.note(base, answer.body)
            return answer
        refused = last_error is not None and nothing_was_sent(last_error)
        raise NoAnswerError(f"{method} {url} got no answer: {last_error}", refused=refused)

    def _signed(
        self, method: str, base: str, target: str, data: bytes | None
    ) -> list[tuple[str, str]]:
        """The signature header of one attempt (a retry is signed anew: a receiver takes
        each signature once)."""
        if self._credential is None:
            return []
        value = self._credential.sign(
            method,
            base,
            target,
            data or b"",
            now_ms=int(time.time() * 1000),
            nonce=new_signature_nonce(),
        )
        return [(SIGNATURE_HEADER, value)]

    def call_ok(
        self,
        method: str,
        url: str,
        body: object | None = None,
        *,
        params: dict[str, str] | None = None,
        idempotent: bool = False,
        timeout_s: float | None = None,
        deadline: Deadline | None = None,
    ) -> object:
        """Like ``call`` but raise the answered error as a ``RaftQError`` unless 2xx."""
        answer = self.call(
            method,
            url,
            body,
            params=params,
            idempotent=idempotent,
            timeout_s=timeout_s,
            deadline=deadline,
        )
        if 200 <= answer.status < 300:
            return answer.body
        raise RaftQError.from_json(answer.status, answer.body)

    def close(self) -> None:
        self._connections.close()


class _RefusalLog:
    """Says in the log, at most once a minute per peer, that a peer refused this node's
    signed request, and what to do. A node of an older RaftQ refuses every signed request
    with its generic 401 (it expects the static token of its version): the cluster then
    runs two versions whose nodes cannot talk, which must not fail silently."""

    PERIOD_S = 60.0
    PEERS_MAX = 1_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_s: dict[str, float] = {}

    def note(self, peer: str, body: object) -> None:
        message = str(body.get("message", "")) if isinstance(body, dict) else ""
        now_s = time.monotonic()
        with self._lock:
            if now_s - self._last_s.get(peer, float("-inf")) < self.PERIOD_S:
                return
            if len(self._last_s) >= self.PEERS_MAX:
                self._last_s.clear()
            self._last_s[peer] = now_s
        if message.startswith(NODE_REFUSAL):
            _log.warning("%s refused this node's request: %s", peer, message)
        else:
            _log.warning(
                "%s refused this node's signed request (401: %s): a node of an older RaftQ "
                "refuses signed node requests; run the same RaftQ version on every node "
                "(ARCHITECTURE.md, 'Upgrading to signed node requests')",
                peer,
                message[:200],
            )


def _split(url: str) -> tuple[str, str]:
    """``http://host:port/path`` -> (``http://host:port``, ``/path``)."""
    parts = urlsplit(url)
    path = parts.path or "/"
    return f"{parts.scheme}://{parts.netloc}", f"{path}?{parts.query}" if parts.query else path


def _json_or_text(data: bytes) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"message": data[:500].decode("utf-8", "replace")}
