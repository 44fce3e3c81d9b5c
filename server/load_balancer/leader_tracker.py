"""Who leads the managers: polls every manager's ``GET /raft_status`` and keeps the answer.

``choose_leader`` and ``describe_no_leader`` are pure; ``LeaderTracker`` owns the I/O.
Threads: one daemon thread ("leader-tracker") polls every
``manager_poll_period_s``; each poll asks all managers at once on a small pool
("manager-poll-N", one thread per manager) so a paused manager costs at most
``manager_poll_timeout_s``, not that times the number of managers. Request threads call
``refresh()`` when the leader they used turned out not to be one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import requests

from protocol.limits import Limits


@dataclass(frozen=True, slots=True)
class ManagerView:
    """What one manager said about itself in its last poll."""

    address: str
    reachable: bool
    is_leader: bool = False
    term: int = -1
    """-1 when unknown (unreachable or not yet polled)."""
    leader_address: str | None = None
    """The leader's HTTP URL as this manager knows it."""
    error: str | None = None
    """Why the manager is unreachable, or why its answer was unusable."""

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {
            "address": self.address,
            "is_leader": self.is_leader,
            "term": self.term,
            "reachable": self.reachable,
        }
        if self.error is not None:
            body["error"] = self.error
        return body


def parse_raft_status(address: str, body: object) -> ManagerView:
    """A manager's ``/raft_status`` answer as a view; a malformed answer counts as not leader."""
    if not isinstance(body, dict):
        return ManagerView(address, reachable=True, error="/raft_status is not a JSON object")
    is_leader = body.get("is_leader")
    term = body.get("term")
    leader = body.get("leader_address")
    if not isinstance(is_leader, bool) or not isinstance(term, int) or isinstance(term, bool):
        return ManagerView(address, reachable=True, error="/raft_status lacks is_leader or term")
    return ManagerView(
        address,
        reachable=True,
        is_leader=is_leader,
        term=term,
        leader_address=leader if isinstance(leader, str) else None,
    )


def choose_leader(views: Sequence[ManagerView]) -> str | None:
    """The address of the reachable manager that says it leads, in the highest term.

    Two managers may both claim to lead for a moment: a deposed leader that has not yet
    heard of the new term. Raft's newer term always wins, so the highest term is the leader.
    """
    claims = [v for v in views if v.reachable and v.is_leader]
    if not claims:
        return None
    return max(claims, key=lambda v: v.term).address


def describe_no_leader(views: Sequence[ManagerView]) -> str:
    """Why no leader is known, one clause per manager, for the 503 message."""
    parts = []
    for view in views:
        if not view.reachable:
            parts.append(f"{view.address} unreachable ({view.error})")
        elif view.error is not None:
            parts.append(f"{view.address} answered badly ({view.error})")
        else:
            knows = view.leader_address or "none"
            parts.append(f"{view.address} is not the leader (term {view.term}, leader {knows})")
    return "; ".join(parts) if parts else "no managers configured"


class LeaderTracker:
    """Caches the manager leader's URL. Thread-safe; ``start()`` it inside the worker."""

    def __init__(
        self, manager_urls: Sequence[str], limits: Limits, ca_path: Path | None = None
    ) -> None:
        """``ca_path``: the CA bundle ``https://`` managers are checked against (``None``:
        the system's)."""
        self._urls = list(manager_urls)
        """Guarded by ``_lock``: a manager named as the leader by another is added."""
        self._urls_max = max(len(self._urls), limits.lb_managers_max)
        self._period_s = limits.manager_poll_period_s
        # Connecting to a live manager on the same network takes far less than a poll timeout.
        self._timeout = (
            min(limits.http_connect_timeout_s, limits.manager_poll_timeout_s),
            limits.manager_poll_timeout_s,
        )
        self._sessions = {url: requests.Session() for url in self._urls}
        # Per request, not on the sessions: requests lets $REQUESTS_CA_BUNDLE override a
        # session's CA but not a request's.
        self._verify: str | bool = True if ca_path is None else str(ca_path)
        self._pool = ThreadPoolExecutor(self._urls_max, thread_name_prefix="manager-poll")
        self._lock = threading.Lock()
        """Guards ``_views``, ``_leader`` and ``_last_poll_started_s``."""
        self._refresh_lock = threading.Lock()
        """Serialises polls: many request threads refreshing at once share one poll."""
        self._views = tuple(
            ManagerView(url, reachable=False, error="not polled yet") for url in self._urls
        )
        self._leader: str | None = None
        self._last_poll_started_s = float("-inf")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-tracker", daemon=True)

    @property
    def leader_url(self) -> str | None:
        with self._lock:
            return self._leader

    @property
    def views(self) -> tuple[ManagerView, ...]:
        with self._lock:
            return self._views

    def no_leader_reason(self) -> str:
        return describe_no_leader(self.views)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=True)
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()

    def refresh(self) -> str | None:
        """Poll every manager now (unless a poll started since this call) and return the
        leader, or ``None`` when no manager claims to lead."""
        called_s = time.monotonic()
        with self._refresh_lock:
            with self._lock:
                if self._last_poll_started_s >= called_s:
                    return self._leader
                self._last_poll_started_s = time.monotonic()
            views = self._poll_all()
            self._learn(views)
            leader = choose_leader(views)
            with self._lock:
                self._views = views
                self._leader = leader
            return leader

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except RuntimeError:
                # The pool refuses work once stop() shut it down; the loop then ends.
                if self._stop.is_set():
                    return
                raise
            self._stop.wait(self._period_s)

    def _learn(self, views: Sequence[ManagerView]) -> None:
        """A leader that some manager names and that is not polled yet (a manager added
        since this load balancer started) is polled from the next round on."""
        with self._lock:
            for view in views:
                url = view.leader_address
                if url and url not in self._urls and len(self._urls) < self._urls_max:
                    self._urls.append(url)
                    self._sessions[url] = requests.Session()

    def _poll_all(self) -> tuple[ManagerView, ...]:
        with self._lock:
            urls = list(self._urls)
        futures = [self._pool.submit(self._poll_one, url) for url in urls]
        return tuple(f.result() for f in futures)

    def _poll_one(self, url: str) -> ManagerView:
        with self._lock:
            session = self._sessions[url]
        try:
            response = session.get(f"{url}/raft_status", timeout=self._timeout, verify=self._verify)
            body = response.json()
        except requests.RequestException as exc:
            return ManagerView(url, reachable=False, error=_short_error(exc))
        except ValueError:
            return ManagerView(url, reachable=True, error="/raft_status is not JSON")
        return parse_raft_status(url, body)


def _short_error(exc: requests.RequestException) -> str:
    """A one-line reason for the 503 message, e.g. "connection refused" or "timed out"."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    cause: BaseException | None = exc
    for _ in range(8):  # bounded walk down the cause chain to the socket error
        if cause is None or (isinstance(cause, OSError) and cause.errno is not None):
            break
        reason = getattr(cause, "reason", None)  # urllib3 keeps the socket error there
        if isinstance(reason, BaseException):
            cause = reason
        else:
            cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return f"{type(exc).__name__}: {str(exc)[:200]}"
