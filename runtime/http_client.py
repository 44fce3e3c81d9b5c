"""JSON over HTTP between components, with bounded timeouts and retries.

Only a call that is safe to repeat is retried, and only on errors that prove nothing was
processed (connection refused) unless the caller says the call is idempotent.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import requests

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits


class NoAnswerError(RaftQError):
    """``UNAVAILABLE``: no answer came. ``refused`` says the connection was refused, which
    proves the request was not processed (safe to send elsewhere)."""

    def __init__(self, message: str, *, refused: bool) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    body: object
    headers: dict[str, str]


class JsonHttpClient:
    """One per component; thread-safe (a ``requests.Session`` per call keeps it simple)."""

    def __init__(self, limits: Limits, timeout_s: float | None = None) -> None:
        self._limits = limits
        self._timeout_s = limits.http_timeout_s if timeout_s is None else timeout_s
        self._session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=16, pool_maxsize=64)
        self._session.mount("http://", adapter)

    def call(
        self,
        method: str,
        url: str,
        body: object | None = None,
        *,
        params: dict[str, str] | None = None,
        idempotent: bool = False,
        timeout_s: float | None = None,
    ) -> HttpAnswer:
        """Send and return the answer whatever its status; raise ``NoAnswerError`` (a
        ``RaftQError(UNAVAILABLE)``) when no answer came."""
        attempts = self._limits.http_retries_max
        last_error: Exception | None = None
        for attempt in range(attempts):
            try:
                response = self._session.request(
                    method,
                    url,
                    json=body,
                    params=params,
                    timeout=(self._limits.http_connect_timeout_s, timeout_s or self._timeout_s),
                )
            except requests.ConnectionError as exc:
                # Refused or reset before an answer: with a refused connect nothing was sent.
                last_error = exc
                if not (idempotent or _refused(exc)) or attempt + 1 == attempts:
                    break
                time.sleep(random.uniform(0, self._limits.http_retry_backoff_s_max))
                continue
            except requests.RequestException as exc:
                # A timeout, or the answer broken off mid-way (the peer died while answering:
                # ChunkedEncodingError): the request may have been processed.
                last_error = exc
                if not idempotent or attempt + 1 == attempts:
                    break
                continue
            return HttpAnswer(response.status_code, _json_or_text(response), dict(response.headers))
        refused = isinstance(last_error, requests.ConnectionError) and _refused(last_error)
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
    ) -> object:
        """Like ``call`` but raise the answered error as a ``RaftQError`` unless 2xx."""
        answer = self.call(
            method, url, body, params=params, idempotent=idempotent, timeout_s=timeout_s
        )
        if 200 <= answer.status < 300:
            return answer.body
        raise RaftQError.from_json(answer.status, answer.body)


def _refused(exc: requests.ConnectionError) -> bool:
    text = str(exc)
    return "Connection refused" in text or "NewConnectionError" in text


def _json_or_text(response: requests.Response) -> object:
    try:
        return response.json()
    except ValueError:
        return {"message": response.text[:500]}
