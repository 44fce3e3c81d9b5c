"""``KeyVerifier``: what a broker knows about the API keys its direct-path clients send.

The keys live in the managers' replicated state; a broker asks the manager leader (straight,
as a node: ``broker.managers``) about a key it has not seen within ``key_cache_s``,
sending the key's id and hash, never the key. Answers, also "unknown", are kept that long,
so a revoked key still works here for up to ``key_cache_s`` (the load balancer path checks
every request against the managers' state). Thread-safe: connection threads share it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from broker.managers import Managers
from protocol.access import Grant, Principal, Role, key_hash, parse_key, require_owner
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ManagerAnswers(Generic[K, V]):
    """The manager leader's answers to one kind of question (``POST path``), each kept
    ``key_cache_s``, "unknown" (404) too, at most ``key_cache_entries_max`` of them (then
    forgotten at once: the ones in use are asked again). Thread-safe."""

    def __init__(
        self, managers: Managers, limits: Limits, path: str, clock: Callable[[], float]
    ) -> None:
        self._managers = managers
        self._path = path
        self._timeout_s = limits.http_connect_timeout_s
        self._ttl_s = limits.key_cache_s
        self._entries_max = limits.key_cache_entries_max
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[float, V | None]] = {}
        """Question -> (valid until, answer or None for unknown)."""

    def get(
        self,
        question: K,
        body: dict[str, object],
        what: str,
        parse: Callable[[dict[str, object]], V],
    ) -> V | None:
        """The answer to ``question`` (asked with ``body`` unless known), None for unknown;
        503 REFUSED naming ``what`` when the managers cannot answer now."""
        now_s = self._clock()
        with self._lock:
            entry = self._entries.get(question)
        if entry is not None and entry[0] > now_s:
            return entry[1]
        found = self._ask(body, what, parse)
        with self._lock:
            if len(self._entries) >= self._entries_max:
                self._entries.clear()
            self._entries[question] = (now_s + self._ttl_s, found)
        return found

    def _ask(
        self, body: dict[str, object], what: str, parse: Callable[[dict[str, object]], V]
    ) -> V | None:
        answer = self._managers.call(
            "POST", self._path, body, idempotent=True, timeout_s=self._timeout_s
        )
        if answer.status == 404:
            return None
        found = answer.body
        if answer.status != 200 or not isinstance(found, dict):
            raise RaftQError(
                ErrorCode.REFUSED,
                f"cannot check the {what} with the managers now ({answer.status}): retry",
            )
        return parse(found)


class KeyVerifier:
    def __init__(
        self,
        managers: Managers,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``managers``: one attempt per manager and a short wait (a client waits on this,
        and falls back to the load balancer on 503)."""
        self._answers: ManagerAnswers[str, Grant] = ManagerAnswers(
            managers, limits, "/keys/verify", clock
        )

    def grant(self, key: str) -> Grant | None:
        key_id = parse_key(key)
        if key_id is None:
            return None
        hashed = key_hash(key)
        body: dict[str, object] = {"key_id": key_id, "key_hash": hashed}
        return self._answers.get(hashed, body, "API key", lambda found: _grant(key_id, found))


def _grant(key_id: str, body: dict[str, object]) -> Grant:
    role, topics = body.get("role"), body.get("topics")
    try:
        parsed = Role(role)
    except ValueError:
        raise RaftQError(
            ErrorCode.REFUSED, "the managers' answer about a key is malformed"
        ) from None
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise RaftQError(ErrorCode.REFUSED, "the managers' answer about a key is malformed")
    return Grant(key_id, parsed, tuple(topics))


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """What the managers hold of a producer or consumer id (``POST /clients/verify``)."""

    topic: str
    partition_id: int | None
    owner: str | None
    """The key id that registered it (``None``: a node, or before owners were kept)."""


class ClientVerifier:
    """What a broker knows about the producer and consumer ids its direct-path clients
    send (issue 23): an id must be registered with the managers, for the request's topic,
    and belong to the caller's key. Asked of the manager leader as ``KeyVerifier`` asks
    about keys, and kept as long (``key_cache_s``, at most ``key_cache_entries_max``
    ids), "unknown" too: an id registered a moment ago is refused here for up to that long
    (the client then goes through the load balancer, which the managers answer at once).
    Thread-safe."""

    def __init__(
        self,
        managers: Managers,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._answers: ManagerAnswers[tuple[str, str], ClientRecord] = ManagerAnswers(
            managers, limits, "/clients/verify", clock
        )

    def check(self, principal: Principal | None, kind: str, client_id: str, topic: str) -> None:
        """Raise unless ``principal`` may act as ``kind`` ``client_id`` on ``topic``: 404
        UNKNOWN_PRODUCER/CONSUMER for an id the managers do not hold (register it through
        the load balancer), 400 for another topic, 403 for another key's id. A node is
        trusted (the manager checked what it forwards)."""
        if not isinstance(principal, Grant):
            return
        what = f"{kind} {client_id!r}"
        record = self._record(kind, client_id)
        if record is None:
            code = ErrorCode.UNKNOWN_PRODUCER if kind == "producer" else ErrorCode.UNKNOWN_CONSUMER
            raise RaftQError(code, f"unknown {kind}; register it first")
        if record.topic != topic:
            raise RaftQError(
                ErrorCode.INVALID_FIELD, f"{what} is registered for topic {record.topic!r}"
            )
        require_owner(principal, what, record.owner)

    def _record(self, kind: str, client_id: str) -> ClientRecord | None:
        body: dict[str, object] = {"kind": kind, "client_id": client_id}
        return self._answers.get((kind, client_id), body, f"{kind} id", _client_record)


def _client_record(body: dict[str, object]) -> ClientRecord:
    topic, partition_id, owner = body.get("topic"), body.get("partition_id"), body.get("owner")
    if not isinstance(topic, str) or not isinstance(owner, str | None):
        raise RaftQError(ErrorCode.REFUSED, "the managers' answer about an id is malformed")
    return ClientRecord(topic, partition_id if isinstance(partition_id, int) else None, owner)
