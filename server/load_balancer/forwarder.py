"""Forwards one HTTP request to the manager leader and hands back its answer unchanged.

A request is retried once, on a freshly polled leader, only when the first attempt provably
did nothing: the connection was never made (refused, connect timeout), or the manager
answered 503 ``NOT_LEADER`` (a follower refuses before acting). Any other failure after the
request was sent (read timeout, reset) may have had an effect, so it becomes 503
``UNAVAILABLE`` and the client decides (its retries carry sequences and request ids).

Thread-safe: request threads share one set of keep-alive connections
(``runtime.http_connection``: the bytes pass through unchanged, and urllib3 cost more CPU per
call than forwarding itself).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass

from load_balancer.leader_tracker import LeaderTracker
from protocol.deadline import EPOCH_HEADER as EPOCH_DEADLINE_HEADER
from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_client import connections, nothing_was_sent
from runtime.http_connection import AnswerLostError, NoAnswerFromPeerError
from runtime.metrics import Metrics

HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 section 7.6.1: meaningful for one connection only, never forwarded."""

_NOT_FORWARDED_REQUEST = frozenset({"host", "content-length"})
"""The upstream connection sets its own Host and Content-Length."""

_NOT_RETURNED_RESPONSE = frozenset({"content-length", "server", "date"})
"""Our server sets its own Content-Length and Date (passing the manager's would send them
twice) and names no Server."""

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class IncomingRequest:
    method: str
    path_and_query: str
    """As the client sent it, still percent-encoded, e.g. ``/logs?topic=t&offset=3``."""
    headers: Headers
    body: bytes
    client_address: str | None = None


@dataclass(frozen=True, slots=True)
class ForwardedAnswer:
    status: int
    headers: Headers
    body: bytes


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Headers named in ``Connection`` are hop-by-hop for this message too."""
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def request_headers_to_forward(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    items = list(headers)
    dropped = HOP_BY_HOP_HEADERS | _NOT_FORWARDED_REQUEST | _connection_tokens(items)
    return {name: value for name, value in items if name.lower() not in dropped}


def response_headers_to_return(headers: Iterable[tuple[str, str]]) -> Headers:
    items = list(headers)
    dropped = HOP_BY_HOP_HEADERS | _NOT_RETURNED_RESPONSE | _connection_tokens(items)
    return tuple((name, value) for name, value in items if name.lower() not in dropped)


def is_not_leader_answer(answer: ForwardedAnswer) -> bool:
    """A follower's 503 ``NOT_LEADER``: it did nothing, so asking the real leader is safe."""
    if answer.status != ErrorCode.NOT_LEADER.status:
        return False
    try:
        body = json.loads(answer.body)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("error_code") == ErrorCode.NOT_LEADER.value


class Forwarder:
    def __init__(
        self, tracker: LeaderTracker, limits: Limits, metrics: Metrics, tls: ssl.SSLContext
    ) -> None:
        """``tls``: how ``https://`` managers are checked."""
        self._tracker = tracker
        self._limits = limits
        self._metrics = metrics
        # The manager bounds its own calls to brokers by http_timeout_s after connecting;
        # waiting a connect timeout longer lets its answer (even an error) reach the client.
        self._read_timeout_s = limits.http_timeout_s + limits.http_connect_timeout_s
        self._connections = connections(limits, tls)

    def close(self) -> None:
        self._connections.close()

    def forward(self, incoming: IncomingRequest) -> ForwardedAnswer:
        """The leader's answer; raises ``RaftQError`` (503) when there is none to give."""
        # The absolute deadline too: time the request waited in this process's socket (say
        # while it was stopped) is invisible to the relative budget.
        deadline = Deadline.from_headers(
            _header(incoming.headers, DEADLINE_HEADER),
            _header(incoming.headers, EPOCH_DEADLINE_HEADER),
            time.monotonic(),
            _wall_ms(),
            self._read_timeout_s,
            self._limits.deadline_clock_skew_s_max,
        )
        leader = self._tracker.leader_url
        for attempt in range(2):
            if leader is None:
                self._metrics.inc("no_leader")
                raise RaftQError(
                    ErrorCode.NO_LEADER, f"no manager leader: {self._tracker.no_leader_reason()}"
                )
            try:
                answer = self._send(leader, incoming, deadline)
            except NoAnswerFromPeerError as exc:
                if attempt == 0 and nothing_was_sent(exc):
                    self._metrics.inc("retries", reason="connect_failed")
                    leader = self._tracker.refresh()
                    continue
                self._metrics.inc("unavailable")
                code = ErrorCode.REFUSED if nothing_was_sent(exc) else ErrorCode.UNAVAILABLE
                raise RaftQError(code, _failure_message(leader, exc)) from exc
            if attempt == 0 and is_not_leader_answer(answer):
                self._metrics.inc("retries", reason="not_leader")
                leader = self._tracker.refresh()
                continue
            self._metrics.inc("forwarded", status=str(answer.status))
            return answer
        # Unreachable: the second attempt always returns or raises. Kept for the type checker.
        raise RaftQError(ErrorCode.UNAVAILABLE, "no answer from the manager leader")

    def _send(self, leader: str, incoming: IncomingRequest, deadline: Deadline) -> ForwardedAnswer:
        now_s = time.monotonic()
        if deadline.expired(now_s):
            raise RaftQError(ErrorCode.REFUSED, "the client's deadline passed: not forwarded")
        headers = request_headers_to_forward(incoming.headers)
        # Both forms are sent as this hop computed them: the client's own copies could be
        # later than what is left (it was read with a default bound and a skew allowance).
        deadline_headers = {DEADLINE_HEADER.lower(), EPOCH_DEADLINE_HEADER.lower()}
        for name in [n for n in headers if n.lower() in deadline_headers]:
            del headers[name]
        margin_s = self._limits.deadline_reply_margin_s
        headers[DEADLINE_HEADER] = deadline.header_value(now_s, margin_s)
        headers[EPOCH_DEADLINE_HEADER] = deadline.epoch_header_value(now_s, _wall_ms(), margin_s)
        if incoming.client_address:
            _append_forwarded_for(headers, incoming.client_address)
        # The raw bytes both ways, still encoded as sent (a Content-Encoding holds).
        answer = self._connections.request(
            incoming.method,
            leader,
            incoming.path_and_query,
            incoming.body or None,
            headers.items(),
            connect_timeout_s=self._limits.http_connect_timeout_s,
            read_timeout_s=deadline.remaining_s(now_s),
        )
        return ForwardedAnswer(
            answer.status, response_headers_to_return(answer.headers), answer.body
        )


def _wall_ms() -> int:
    """Epoch milliseconds: what the absolute deadline (``EPOCH_DEADLINE_HEADER``) counts in."""
    return int(time.time() * 1000)


def _header(headers: Headers, name: str) -> str | None:
    return next((value for key, value in headers if key.lower() == name.lower()), None)


def _append_forwarded_for(headers: dict[str, str], client_address: str) -> None:
    previous = [name for name in headers if name.lower() == "x-forwarded-for"]
    chain = [headers.pop(name) for name in previous]
    headers["X-Forwarded-For"] = ", ".join([*chain, client_address])


def _failure_message(leader: str, exc: NoAnswerFromPeerError) -> str:
    if isinstance(exc, AnswerLostError) and exc.timed_out:
        what = "timed out waiting for its answer"
    else:
        what = f"lost the connection ({type(exc).__name__})"
    return (
        f"the manager leader {leader} {what}; the request may or may not have taken effect "
        "(retry with the same sequence or request_id)"
    )
