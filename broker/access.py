"""``KeyVerifier``: what a broker knows about the API keys its direct-path clients send.

The keys live in the managers' replicated state; a broker asks the manager leader (through
its managers URL, with the node token) about a key it has not seen within ``key_cache_s``,
sending the key's id and hash, never the key. Answers, also "unknown", are kept that long,
so a revoked key still works here for up to ``key_cache_s`` (the load balancer path checks
every request against the managers' state). Thread-safe: connection threads share it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from protocol.access import Grant, Role, key_hash, parse_key
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from runtime.http_client import JsonHttpClient, PeerLink


class KeyVerifier:
    def __init__(
        self,
        managers_url: str,
        limits: Limits,
        link: PeerLink,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = f"{managers_url}/keys/verify"
        # One attempt: a client waits on this, and falls back to the load balancer on 503.
        self._client = JsonHttpClient(
            replace(limits, http_retries_max=1),
            link,
            timeout_s=limits.http_connect_timeout_s,
        )
        self._ttl_s = limits.key_cache_s
        self._entries_max = limits.key_cache_entries_max
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Grant | None]] = {}
        """Key hash -> (valid until, grant or None for unknown)."""

    def grant(self, key: str) -> Grant | None:
        key_id = parse_key(key)
        if key_id is None:
            return None
        hashed = key_hash(key)
        now_s = self._clock()
        with self._lock:
            entry = self._entries.get(hashed)
        if entry is not None and entry[0] > now_s:
            return entry[1]
        found = self._ask(key_id, hashed)
        with self._lock:
            if len(self._entries) >= self._entries_max:
                self._entries.clear()  # bounded; the keys in use are asked again
            self._entries[hashed] = (now_s + self._ttl_s, found)
        return found

    def _ask(self, key_id: str, hashed: str) -> Grant | None:
        answer = self._client.call(
            "POST", self._url, {"key_id": key_id, "key_hash": hashed}, idempotent=True
        )
        if answer.status == 404:
            return None
        body = answer.body
        if answer.status != 200 or not isinstance(body, dict):
            raise RaftQError(
                ErrorCode.REFUSED,
                f"cannot check the API key with the managers now ({answer.status}): retry",
            )
        return _grant(key_id, body)


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
