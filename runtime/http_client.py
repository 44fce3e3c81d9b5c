"""JSON over HTTP between components, with bounded timeouts and retries.

Only a call that is safe to repeat is retried, and only on errors that prove nothing was
processed (the connection was never made) unless the caller says the call is idempotent.

Built on urllib3's connection pool and orjson directly: ``requests`` costs about as much CPU
per call as the handler it calls (netrc and proxy lookups, cookie and settings merging on
every request), and every produce crosses two of these hops.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import orjson
import urllib3
from urllib3.exceptions import ConnectTimeoutError, HTTPError, MaxRetryError

from protocol.deadline import HEADER as DEADLINE_HEADER
from protocol.deadline import Deadline
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits

_JSON_HEADERS = {"Content-Type": "application/json"}


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
    """True when the TCP connection was never established, so the peer saw nothing.
    (urllib3's ``NewConnectionError``, a refused connect, is a ``ConnectTimeoutError``.)"""
    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    return isinstance(exc, ConnectTimeoutError)


class JsonHttpClient:
    """One per component; thread-safe (urllib3's pool is)."""

    def __init__(self, limits: Limits, timeout_s: float | None = None) -> None:
        self._limits = limits
        self._timeout_s = limits.http_timeout_s if timeout_s is None else timeout_s
        self._pool = urllib3.PoolManager(num_pools=16, maxsize=64, retries=False)

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
        target = f"{url}?{urlencode(params)}" if params else url
        read_s = timeout_s or self._timeout_s
        attempts = self._limits.http_retries_max
        last_error: HTTPError | None = None
        for attempt in range(attempts):
            now_s = time.monotonic()
            headers = dict(_JSON_HEADERS) if data is not None else {}
            if deadline is not None:
                if deadline.expired(now_s):
                    raise NoAnswerError(
                        f"{method} {url} not sent: its caller's deadline passed", refused=True
                    )
                headers[DEADLINE_HEADER] = deadline.header_value(
                    now_s, self._limits.deadline_reply_margin_s
                )
            timeout = urllib3.Timeout(
                connect=self._limits.http_connect_timeout_s,
                read=read_s if deadline is None else deadline.bound(read_s, now_s),
            )
            try:
                response = self._pool.request(
                    method, target, body=data, headers=headers, timeout=timeout, redirect=False
                )
            except HTTPError as exc:
                # Never connected: nothing was sent. Otherwise (a timeout, or the answer
                # broken off mid-way because the peer died while answering) the request
                # may have been processed.
                last_error = exc
                if not (idempotent or nothing_was_sent(exc)) or attempt + 1 == attempts:
                    break
                time.sleep(random.uniform(0, self._limits.http_retry_backoff_s_max))
                continue
            return HttpAnswer(response.status, _json_or_text(response.data), dict(response.headers))
        refused = last_error is not None and nothing_was_sent(last_error)
        raise NoAnswerError(f"{method} {url} got no answer: {last_error}", refused=refused)

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
        self._pool.clear()


def _json_or_text(data: bytes) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return {"message": data[:500].decode("utf-8", "replace")}
