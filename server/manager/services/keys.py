"""API keys: made here, kept as hashes in the registry, checked for the HTTP layer and for
brokers."""

from __future__ import annotations

import secrets

from manager.registry import commands
from manager.services.context import ServiceContext, check_outcome
from protocol.access import KEY_ID_CHARS, Grant, key_hash, make_key, parse_key, same_secret
from protocol.errors import ErrorCode, RaftQError
from protocol.requests import CreateKeyRequest


class KeyService:
    """Create, list, revoke and check API keys."""

    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self._limits = context.limits
        self._raft = context.raft
        self._clock_ms = context.clock_ms

    def create_key(self, request: CreateKeyRequest) -> dict[str, object]:
        """Make a key and record its hash; the answer is the only place the key appears."""
        key_id = secrets.token_hex(KEY_ID_CHARS // 2)
        key = make_key(key_id, secrets.token_urlsafe(32))
        outcome = self._raft.propose(
            commands.CreateKey(
                key_id,
                key_hash(key),
                request.role.value,
                request.topics,
                request.name,
                self._clock_ms(),
                self._limits.registry_keys_max,
            )
        )
        check_outcome(outcome, "key")
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None:  # revoked between the propose and the read: say so
            raise RaftQError(ErrorCode.NOT_FOUND, f"key {key_id} was revoked at once")
        return {"key": key, **record.to_json()}

    def keys(self) -> dict[str, object]:
        return {"keys": self._raft.read(lambda s: [r.to_json() for r in s.keys.records()])}

    def revoke_key(self, key_id: str) -> dict[str, object]:
        if self._raft.read(lambda s: s.keys.get(key_id)) is None:
            raise RaftQError(ErrorCode.NOT_FOUND, f"no key {key_id} (or it is revoked already)")
        check_outcome(self._raft.propose(commands.RevokeKey(key_id)), "key")
        return {"key_id": key_id, "revoked": True}

    def grant(self, key: str) -> Grant | None:
        """The grant of an issued, unrevoked key (``None`` for any other string)."""
        key_id = parse_key(key)
        if key_id is None:
            return None
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None or not same_secret(key_hash(key), record.key_hash):
            return None
        return record.grant

    def verify_key(self, key_id: str, hashed: str) -> dict[str, object]:
        """For a broker: the grant of the key whose hash it sends, else 404."""
        record = self._raft.read(lambda s: s.keys.get(key_id))
        if record is None or not same_secret(hashed, record.key_hash):
            raise RaftQError(ErrorCode.NOT_FOUND, "unknown or revoked API key")
        return record.to_json()
