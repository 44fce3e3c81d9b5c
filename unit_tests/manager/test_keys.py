"""API keys in the managers' replicated state: only hashes kept, bounded, revocable; the
service makes keys and answers who a key is. Pure state, then the service over the
in-memory twin."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from manager.broker_monitor import BrokerMonitor
from manager.raft import registry_twin
from manager.registry import commands
from manager.registry.outcome import Outcome
from manager.registry.state import ManagerState
from manager.services import ManagerServices, ServiceContext
from protocol.access import Grant, Role, key_hash
from protocol.errors import ErrorCode, RaftQError
from protocol.limits import Limits
from protocol.requests import CreateKeyRequest
from unit_tests.manager.test_service import StubBrokers

HASH = "a" * 64


def _create(state: ManagerState, key_id: str, key_hash: str = HASH, keys_max: int = 10) -> Outcome:
    return state.apply(
        commands.CreateKey(key_id, key_hash, "consumer", ("t",), "n", 1_000, keys_max)
    )


def test_a_key_is_created_once_bounded_and_revoked() -> None:
    state = ManagerState()
    assert _create(state, "0123456789ab") is Outcome.CREATED
    assert _create(state, "0123456789ab") is Outcome.UNCHANGED  # a retried command
    assert _create(state, "0123456789ab", "b" * 64) is Outcome.EXISTS
    assert _create(state, "0123456789ac", keys_max=1) is Outcome.TOO_MANY
    record = state.keys.get("0123456789ab")
    assert record is not None and record.grant == Grant("0123456789ab", Role.CONSUMER, ("t",))
    assert "key_hash" not in record.to_json()
    assert state.apply(commands.RevokeKey("0123456789ab")) is Outcome.UPDATED
    assert state.apply(commands.RevokeKey("0123456789ab")) is Outcome.UNCHANGED
    assert state.keys.get("0123456789ab") is None


@pytest.mark.parametrize(
    "command",
    [
        commands.CreateKey("short", HASH, "admin", (), "", 1, 10),
        commands.CreateKey("0123456789ab", "not-a-hash", "admin", (), "", 1, 10),
        commands.CreateKey("0123456789ab", HASH, "root", (), "", 1, 10),
        commands.CreateKey("0123456789ab", HASH, "admin", ("",), "", 1, 10),
        commands.CreateKey("0123456789ab", HASH, "admin", (), "n" * 101, 1, 10),
    ],
)
def test_a_bad_key_command_changes_nothing(command: commands.CreateKey) -> None:
    state = ManagerState()
    assert state.apply(command) is Outcome.INVALID
    assert state.revision == 0 and len(state.keys) == 0


def test_a_dump_from_before_keys_loads_and_keys_survive_a_dump() -> None:
    state = ManagerState()
    del state.__dict__["keys"]
    restored: ManagerState = pickle.loads(pickle.dumps(state))
    assert len(restored.keys) == 0
    assert _create(restored, "0123456789ab") is Outcome.CREATED
    again: ManagerState = pickle.loads(pickle.dumps(restored))
    assert again.keys.get("0123456789ab") == restored.keys.get("0123456789ab")


def test_the_service_makes_keys_and_knows_them_by_their_hash() -> None:
    limits = Limits()
    registry = registry_twin()
    with ThreadPoolExecutor(2) as executor:
        monitor = BrokerMonitor(limits.broker_dead_after_s)
        service = ManagerServices.over(
            ServiceContext(limits, registry, StubBrokers(), monitor, executor)
        )
        made = service.keys.create_key(CreateKeyRequest(Role.PRODUCER, ("orders",), "app"))
        key, key_id = str(made["key"]), str(made["key_id"])
        assert key.startswith(f"rq_{key_id}_") and made["role"] == "producer"
        assert key not in str(registry.read(lambda s: s.__dict__))  # only its hash is kept
        assert service.keys.grant(key) == Grant(key_id, Role.PRODUCER, ("orders",))
        assert service.keys.grant(key[:-1] + ("x" if key[-1] != "x" else "y")) is None
        assert service.keys.verify_key(key_id, key_hash(key))["role"] == "producer"
        assert registry.read(lambda s: [r.key_id for r in s.keys.records()]) == [key_id]
        service.keys.revoke_key(key_id)
        assert service.keys.grant(key) is None
        with pytest.raises(RaftQError) as missing:
            service.keys.revoke_key(key_id)
        assert missing.value.code is ErrorCode.NOT_FOUND
        with pytest.raises(RaftQError) as missing:
            service.keys.verify_key(key_id, key_hash(key))
        assert missing.value.code is ErrorCode.NOT_FOUND
