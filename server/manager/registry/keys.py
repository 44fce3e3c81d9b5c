"""API keys: per key id, the SHA-256 of the key and what it may do. Pure.

The key itself is made by the proposer and shown once to whoever asked for it; the Raft log,
the snapshots and every manager hold only its hash (``protocol.access.key_hash``). Revoking
forgets the record: key ids are random, so none comes back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from manager.registry.outcome import Outcome
from protocol import snapshot_fields
from protocol.access import Grant, Role
from protocol.requests import KEY_NAME_CHARS_MAX

_KEY_ID = re.compile(r"^[0-9a-f]{12}$")
_HASH = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    key_hash: str
    role: Role
    topics: tuple[str, ...]
    name: str
    created_ms: int
    version: int

    def __getstate__(self) -> list[object]:
        return snapshot_fields.state_of(self)

    def __setstate__(self, state: list[object]) -> None:
        snapshot_fields.restore(self, state)

    @property
    def grant(self) -> Grant:
        return Grant(self.key_id, self.role, self.topics)

    def to_json(self) -> dict[str, object]:
        """What anyone may see of a key: never its hash."""
        return {
            "key_id": self.key_id,
            "role": self.role.value,
            "topics": list(self.topics),
            "name": self.name,
            "created_ms": self.created_ms,
        }


class KeyRegistry:
    def __init__(self) -> None:
        self._keys: dict[str, KeyRecord] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, key_id: str) -> KeyRecord | None:
        return self._keys.get(key_id)

    def records(self) -> list[KeyRecord]:
        return sorted(self._keys.values(), key=lambda r: (r.created_ms, r.key_id))

    def add(self, record: KeyRecord, keys_max: int) -> Outcome:
        """CREATED; UNCHANGED for the same record again (a retried command); EXISTS for
        another key under the same id; TOO_MANY at ``keys_max``; INVALID for bad fields."""
        if not _valid(record):
            return Outcome.INVALID
        known = self._keys.get(record.key_id)
        if known is not None:
            return Outcome.UNCHANGED if known.key_hash == record.key_hash else Outcome.EXISTS
        if len(self._keys) >= keys_max:
            return Outcome.TOO_MANY
        self._keys[record.key_id] = record
        return Outcome.CREATED

    def revoke(self, key_id: str) -> Outcome:
        """UPDATED, or UNCHANGED when no such key is known (already revoked)."""
        return Outcome.UPDATED if self._keys.pop(key_id, None) is not None else Outcome.UNCHANGED


def _valid(record: KeyRecord) -> bool:
    return (
        isinstance(record.key_id, str)
        and _KEY_ID.match(record.key_id) is not None
        and isinstance(record.key_hash, str)
        and _HASH.match(record.key_hash) is not None
        and isinstance(record.role, Role)
        and isinstance(record.topics, tuple)
        and all(isinstance(t, str) and t for t in record.topics)
        and isinstance(record.name, str)
        and len(record.name) <= KEY_NAME_CHARS_MAX
        and isinstance(record.created_ms, int)
    )
