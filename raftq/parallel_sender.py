"""One-shot requests sent at once: a batch's partition groups to their brokers, in parallel as
the manager sends them, instead of one commit after another.

Threads: at most ``direct_parallel_requests_max`` worker threads (``raftq-direct-*``),
started at the first call with more than one request and stopped by ``close``. Each request
runs on its own HTTP session taken from a pool of that many (a ``requests.Session`` is not
thread-safe), and a worker does the I/O only: the caller classifies the answers and touches
the client's state on its own thread. A single request runs on the caller's thread.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from raftq.client_limits import ClientLimits
from raftq.http import Failure, HttpTransport, Reply


@dataclass(frozen=True, slots=True)
class Send:
    base_url: str
    method: str
    path: str
    body: object | None = None
    params: Mapping[str, str | int] | None = None


class ParallelSender:
    def __init__(self, limits: ClientLimits, read_timeout_s: float, like: HttpTransport) -> None:
        """Its sessions are ``like``'s siblings (the same key and CA)."""
        self._limits = limits
        self._like = like
        self._read_timeout_s = read_timeout_s
        self._sessions: queue.SimpleQueue[HttpTransport] = queue.SimpleQueue()
        self._all_sessions: list[HttpTransport] = []
        self._executor: ThreadPoolExecutor | None = None

    def send_all(self, sends: Sequence[Send]) -> list[Reply | Failure]:
        """Each request's answer (or the ``Failure`` of its exception), in order."""
        if len(sends) <= 1:
            return [self._send(s) for s in sends]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._limits.direct_parallel_requests_max,
                thread_name_prefix="raftq-direct",
            )
        return list(self._executor.map(self._send, sends))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for session in self._all_sessions:
            session.close()

    def _send(self, send: Send) -> Reply | Failure:
        session = self._idle_session()
        try:
            return session.send_once(
                send.base_url,
                send.method,
                send.path,
                body=send.body,
                params=send.params,
                read_timeout_s=self._read_timeout_s,
            )
        finally:
            self._sessions.put(session)

    def _idle_session(self) -> HttpTransport:
        """One session per request in flight: at most the worker count plus the caller."""
        try:
            return self._sessions.get_nowait()
        except queue.Empty:
            session = self._like.sibling("", self._limits)
            self._all_sessions.append(session)  # list.append is atomic under the GIL
            return session
