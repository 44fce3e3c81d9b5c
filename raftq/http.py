"""JSON over HTTP to the load balancer, with bounded, jittered retries where they are safe.

Which failures prove that nothing happened on the server, so that any request may be resent:
the connection was never made; 429 (backpressure); 503 ``NO_LEADER``, ``NOT_LEADER`` or
``NOT_ENOUGH_BROKERS`` (refused before acting). Which leave the outcome unknown: a timeout or
lost connection after sending; 503 ``COMMIT_TIMEOUT``, ``UNAVAILABLE`` or
``PARTIALLY_WRITTEN``; 500 (an internal error); 502/504. Those are
resent only for idempotent calls (reads, and writes that carry a sequence or request id).

Not thread-safe: one transport per client object, used by one thread at a time.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import orjson
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError

from protocol.access import AUTHORIZATION_HEADER
from protocol.deadline import EPOCH_HEADER as EPOCH_DEADLINE_HEADER
from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import proves_nothing_done
from protocol.streams import Event, EventReader
from raftq.client_limits import ClientLimits
from raftq.errors import ApiError, ProtocolError, UnavailableError
from raftq.node_signing import NodeSigning


@dataclass(frozen=True, slots=True)
class Failure:
    """One attempt that may be worth repeating."""

    description: str
    outcome_unknown: bool
    retry_after_s: float | None = None


def classify_answer(status: int, body: object, retry_after: str | None) -> Failure | None:
    """The retryable failure an answer represents, or ``None`` if it is final. Pure."""
    code = body.get("error_code") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    description = f"{status} {code or ''} {message or ''}".strip()
    wait_s = _parse_retry_after(retry_after)
    if status == 429 or status >= 500:
        # A 500 says nothing about whether the request took effect: only the codes of the
        # one rule prove that nothing was done.
        unknown = not proves_nothing_done(status, body)
        return Failure(description, outcome_unknown=unknown, retry_after_s=wait_s)
    return None


def classify_exception(exc: requests.RequestException) -> Failure:
    if _caused_by(exc, ssl.SSLCertVerificationError):
        # The handshake refused the server's certificate: no request went out.
        return Failure(f"the server's TLS certificate is not trusted: {exc}", outcome_unknown=False)
    if isinstance(exc, requests.ConnectTimeout):
        return Failure(f"could not connect: {exc}", outcome_unknown=False)
    if isinstance(exc, requests.ConnectionError) and exc.args:
        cause = exc.args[0]
        if isinstance(cause, MaxRetryError) and isinstance(cause.reason, NewConnectionError):
            return Failure("could not connect (connection refused)", outcome_unknown=False)
    if isinstance(exc, requests.Timeout):
        return Failure("timed out waiting for the answer", outcome_unknown=True)
    return Failure(f"lost the connection: {type(exc).__name__}", outcome_unknown=True)


def _caused_by(exc: BaseException, kind: type[BaseException], depth_max: int = 8) -> bool:
    """Whether ``kind`` is in ``exc``'s chain (causes, contexts, urllib3's ``reason``)."""
    found: list[BaseException] = [exc]
    for _ in range(depth_max):
        if not found:
            return False
        if any(isinstance(e, kind) for e in found):
            return True
        found = [
            e
            for current in found
            for e in (current.__cause__, current.__context__, getattr(current, "reason", None))
            if isinstance(e, BaseException)
        ] + [e for current in found for e in current.args if isinstance(e, BaseException)]
    return False


def deadline_headers(read_s: float, limits: ClientLimits, wall_ms: int) -> dict[str, str]:
    """How long the answer is waited for, as a budget and as a point in wall time (epoch
    ms): the budget alone cannot tell a server that read the request late (stopped with it
    in its socket) that we are gone. Both less the reply margin, so the server's answer,
    even an error, arrives before we stop waiting. Pure."""
    deadline = Deadline.after(read_s, now_s=0.0)
    margin_s = limits.deadline_reply_margin_s
    return {
        DEADLINE_HEADER: deadline.header_value(0.0, margin_s),
        EPOCH_DEADLINE_HEADER: deadline.epoch_header_value(0.0, wall_ms, margin_s),
    }


def backoff_s(retry_index: int, limits: ClientLimits, rng: random.Random) -> float:
    """Full jitter: uniform in ``[0, min(max, initial * 2**retry_index)]``."""
    ceiling_s = min(limits.backoff_s_max, limits.backoff_s_initial * (2 ** min(retry_index, 30)))
    return rng.uniform(0.0, ceiling_s)


def _parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from our services, and the backoff still applies


class HttpTransport:
    def __init__(
        self,
        url: str,
        limits: ClientLimits,
        *,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        api_key: str | None = None,
        tls_ca: str | None = None,
        node: NodeSigning | None = None,
        node_cert: tuple[str, str] | None = None,
    ) -> None:
        """``api_key`` goes with every request as ``Authorization: Bearer``. ``tls_ca``: the
        CA bundle (PEM) that ``https://`` servers' certificates are checked against (default:
        the system's). ``node``: act as a node, each request signed with a key from the
        cluster secret (``raftq.node_signing``): how the first admin key of a deployment is
        made, asking the manager leader itself (never through the load balancer); with
        ``node_cert`` (certificate and key files) shown to nodes with mutual TLS."""
        self.url = url.rstrip("/")
        self._limits = limits
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._session = requests.Session()
        # Per request, not on the session: requests lets $REQUESTS_CA_BUNDLE override a
        # session's CA but not a request's.
        self._verify: str | bool = tls_ca or True
        self._api_key = api_key
        self._tls_ca = tls_ca
        self._node = node
        self._node_cert = node_cert
        self._auth = {} if api_key is None else {AUTHORIZATION_HEADER: f"Bearer {api_key}"}

    def sibling(self, url: str, limits: ClientLimits) -> HttpTransport:
        """A transport of its own (connections, retries) to ``url`` with the same credentials."""
        return HttpTransport(
            url,
            limits,
            api_key=self._api_key,
            tls_ca=self._tls_ca,
            node=self._node,
            node_cert=self._node_cert,
        )

    def close(self) -> None:
        self._session.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: object | None = None,
        params: Mapping[str, str | int] | None = None,
        idempotent: bool,
        attempts_max: int | None = None,
        read_timeout_s: float | None = None,
        flag_after_unknown_outcome: str | None = None,
    ) -> object:
        """The JSON body of a 2xx answer. Raises ``ApiError`` for a final error answer and
        ``UnavailableError`` once retries are spent or a retry would be unsafe.
        ``attempts_max`` and ``read_timeout_s`` lower the limits' bounds for this call.
        ``flag_after_unknown_outcome``: a query parameter set to ``true`` on every retry
        that follows an attempt whose outcome was unknown (a pop's, for the router)."""
        attempts_max = min(attempts_max or self._limits.attempts_max, self._limits.attempts_max)
        unknown_so_far = False
        failure = Failure("not attempted", outcome_unknown=False)
        for attempt in range(attempts_max):
            if attempt > 0:
                self._pause(attempt - 1, failure)
            sent = params
            if unknown_so_far and flag_after_unknown_outcome is not None:
                sent = {**(params or {}), flag_after_unknown_outcome: "true"}
            failure_or_body = self._attempt(
                method, path, body, sent, unknown_so_far, read_timeout_s
            )
            if not isinstance(failure_or_body, Failure):
                return failure_or_body
            failure = failure_or_body
            unknown_so_far = unknown_so_far or failure.outcome_unknown
            if failure.outcome_unknown and not idempotent:
                raise UnavailableError(
                    f"{method} {path}: {failure.description}; the request may or may not have "
                    "taken effect (not retried: it is not idempotent)",
                    outcome_unknown=True,
                    attempts=attempt + 1,
                )
        raise UnavailableError(
            f"{method} {path} failed after {attempts_max} attempts; last: {failure.description}"
            + ("; the outcome is unknown: it may have taken effect" if unknown_so_far else ""),
            outcome_unknown=unknown_so_far,
            attempts=attempts_max,
        )

    def _pause(self, retry_index: int, failure: Failure) -> None:
        wait_s = backoff_s(retry_index, self._limits, self._rng)
        if failure.retry_after_s is not None:
            wait_s = max(wait_s, min(failure.retry_after_s, self._limits.retry_after_s_max))
        self._sleep(wait_s)

    def _attempt(
        self,
        method: str,
        path: str,
        body: object | None,
        params: Mapping[str, str | int] | None,
        unknown_so_far: bool,
        read_timeout_s: float | None = None,
    ) -> object:
        """The 2xx body, or the ``Failure`` of a retryable attempt; raises a final error."""
        reply = self.send_once(
            self.url, method, path, body=body, params=params, read_timeout_s=read_timeout_s
        )
        if isinstance(reply, Failure):
            return reply
        if 200 <= reply.status < 300:
            if reply.body is None:
                raise ProtocolError(f"{method} {path}: the {reply.status} answer is not JSON")
            return reply.body
        failure = classify_answer(reply.status, reply.body, reply.retry_after)
        if failure is not None:
            return failure
        raise api_error(reply.status, reply.body, after_unknown_outcome=unknown_so_far)

    def send_once(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        body: object | None = None,
        params: Mapping[str, str | int] | None = None,
        read_timeout_s: float | None = None,
    ) -> Reply | Failure:
        """One request to any server (the load balancer, or a broker on the direct path), on
        this transport's connection pool: its answer, or the ``Failure`` of an exception."""
        read_s = self._limits.request_timeout_s
        if read_timeout_s is not None:
            read_s = min(read_s, read_timeout_s)
        # orjson, not requests' json=: a produce batch of thousands of messages is encoded
        # ~5x faster (the asynchronous producer's sender spends its time here).
        content = {} if body is None else {"Content-Type": "application/json"}
        try:
            with self._session.request(
                method,
                base_url.rstrip("/") + path,
                data=None if body is None else orjson.dumps(body),
                params=params,
                headers={
                    **deadline_headers(read_s, self._limits, int(time.time() * 1000)),
                    **self._auth,
                    **content,
                },
                timeout=(self._limits.connect_timeout_s, read_s),
                verify=self._verify,
                auth=self._node,
                cert=self._node_cert,
            ) as response:
                return Reply(
                    response.status_code,
                    _json_or_none(response),
                    response.headers.get("Retry-After"),
                )
        except requests.RequestException as exc:
            return classify_exception(exc)

    def events(self, base_url: str, path: str, params: Mapping[str, str | int]) -> Iterator[Event]:
        """The events of a Server-Sent Events answer (``protocol.streams``), as they come;
        ``ApiError`` for an error answer; ``requests.RequestException`` when the connection
        fails or brings nothing for ``stream_read_timeout_s``. Close the iterator to close
        the connection."""
        with self._session.get(
            base_url.rstrip("/") + path,
            params=params,
            headers=self._auth,
            timeout=(self._limits.connect_timeout_s, self._limits.stream_read_timeout_s),
            verify=self._verify,
            stream=True,
        ) as response:
            if response.status_code != 200:
                raise api_error(
                    response.status_code, _json_or_none(response), after_unknown_outcome=False
                )
            reader, tail = EventReader(), b""
            for chunk in response.iter_content(chunk_size=None):
                *lines, tail = (tail + chunk).split(b"\n")
                for line in lines:
                    yield from reader.feed(line.rstrip(b"\r"))


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status, JSON body (``None`` if not JSON) and Retry-After."""

    status: int
    body: object
    retry_after: str | None = None

    @property
    def error_code(self) -> int | None:
        code = self.body.get("error_code") if isinstance(self.body, dict) else None
        return code if isinstance(code, int) else None


def _json_or_none(response: requests.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return None


def api_error(status: int, body: object, *, after_unknown_outcome: bool) -> ApiError:
    if isinstance(body, dict):
        code = body.get("error_code")
        hint = body.get("leader_hint")
        return ApiError(
            status,
            code if isinstance(code, int) else None,
            str(body.get("message", "")),
            hint if isinstance(hint, str) else None,
            after_unknown_outcome=after_unknown_outcome,
        )
    return ApiError(status, None, "no JSON error body", after_unknown_outcome=after_unknown_outcome)
