"""``Managers``: how a broker calls the manager leader: straight, signed as itself, never
through the client-facing load balancer (issue 23: whoever reads the load balancer's
traffic finds no node credential in it).

The broker knows the managers' URLs from its ``--managers``. A call goes to the manager it
last found leading, else to each in turn; a manager that does not lead answers 503
NOT_LEADER with the leader's URL (``leader_hint``), which is tried next and kept (a manager
added since the broker started is learnt that way; at most ``lb_managers_max``). Those
hints come from the managers' own list, whose every entry proved its address
(``manager.address_proof``), and a request signed for one manager is refused by any other
address. Thread-safe: the registration thread and connection threads share it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_client import HttpAnswer, JsonHttpClient, NoAnswerError


class Managers:
    def __init__(self, urls: Sequence[str], limits: Limits, client: JsonHttpClient) -> None:
        if not urls:
            raise ValueError("a broker needs the managers' URLs")
        self._client = client
        self._urls_max = max(len(urls), limits.lb_managers_max)
        self._lock = threading.Lock()
        self._urls = [url.rstrip("/") for url in urls]
        """Guarded by ``_lock``; a manager named as the leader by another is added."""
        self._leader: str | None = None

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        idempotent: bool = False,
        timeout_s: float | None = None,
    ) -> HttpAnswer:
        """The manager leader's answer (any status), or the last NOT_LEADER when none
        leads; ``NoAnswerError`` when no manager answered (``refused``: none took it)."""
        tried: list[str] = []
        url: str | None = self._first()
        last: HttpAnswer | None = None
        failure: NoAnswerError | None = None
        while url is not None and len(tried) <= self._urls_max:
            tried.append(url)
            try:
                answer = self._client.call(
                    method, url + path, body, idempotent=idempotent, timeout_s=timeout_s
                )
            except NoAnswerError as exc:
                if not exc.refused:
                    raise  # it may have acted: the caller decides
                failure, url = exc, self._next(tried)
                continue
            hint = _not_leader(answer)
            if hint is None:
                with self._lock:
                    self._leader = url
                return answer
            last = answer
            url = hint if hint and hint not in tried and self._learn(hint) else self._next(tried)
        if last is not None:
            return last
        raise failure or NoAnswerError(f"{method} {path}: no manager to ask", refused=True)

    def call_ok(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        idempotent: bool = False,
        timeout_s: float | None = None,
    ) -> object:
        """Like ``call``, but the answered error is raised unless 2xx."""
        answer = self.call(method, path, body, idempotent=idempotent, timeout_s=timeout_s)
        if 200 <= answer.status < 300:
            return answer.body
        raise RaftQError.from_json(answer.status, answer.body)

    def close(self) -> None:
        self._client.close()

    def _first(self) -> str:
        with self._lock:
            return self._leader or self._urls[0]

    def _next(self, tried: list[str]) -> str | None:
        with self._lock:
            return next((url for url in self._urls if url not in tried), None)

    def _learn(self, url: str) -> bool:
        """Keep a manager another named as the leader; False when no room is left."""
        with self._lock:
            if url in self._urls:
                return True
            if len(self._urls) >= self._urls_max:
                return False
            self._urls.append(url)
            return True


def _not_leader(answer: HttpAnswer) -> str | None:
    """``None`` unless the answer is a 503 NOT_LEADER; then its leader hint ("" if none)."""
    body = answer.body
    if answer.status != ErrorCode.NOT_LEADER.status or not isinstance(body, dict):
        return None
    if body.get("error_code") != ErrorCode.NOT_LEADER.value:
        return None
    hint = body.get("leader_hint")
    return hint.rstrip("/") if isinstance(hint, str) else ""
