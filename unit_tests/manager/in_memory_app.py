"""The manager's own ``create_app`` over in-memory twins: the registry is a ``registry_twin``
(one node that always leads), the broker client is whatever the test passes, and the leader
duties thread is not started. Everything else (routes, the leader gate, the error mapping,
metrics, ``GET /openapi.json``) is the production wiring."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import manager.app
from manager.broker_client import BrokerClient
from manager.cluster import ClusterView
from manager.config import ManagerConfig, Peer
from manager.raft import RegistryTwin
from manager.registry.commands import command_name
from protocol.limits import Limits
from raftq.node_signing import NodeSigning
from unit_tests.node_signing import TEST_NODE, signed

SECRET = "in-memory-cluster-secret"
AS_NODE = NodeSigning.of(SECRET, TEST_NODE)
"""What the fuzzing signs every request with (``auth=AS_NODE``): a node may call every
operation, so the fuzzing reaches the handlers (who may call what is tested in
``test_access`` modules)."""


def as_node(method: str, target: str, body: bytes = b"", port: int = 1) -> list[tuple[str, str]]:
    """The headers of a node's request to the manager ``manager_config`` made on ``port``."""
    return signed(SECRET, f"http://127.0.0.1:{port}", method, target, body)


def applied_names(registry: RegistryTwin) -> list[str]:
    """The names of the commands the twin applied, in order."""
    return [command_name(command) for command in registry.applied]


class Idle:
    """Stands for a thread an app would start (leader duties, broker registration)."""

    def __init__(self, *args: object) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def manager_config(
    data_dir: Path, limits: Limits, port: int = 1, raft_port: int = 2
) -> ManagerConfig:
    """A single manager (its own only peer), so ``GET /cluster`` asks no other node."""
    peer = Peer(1, f"http://127.0.0.1:{port}", f"127.0.0.1:{raft_port}")
    return ManagerConfig(1, "127.0.0.1", port, raft_port, (peer,), data_dir, SECRET, limits)


def patch_manager(
    monkeypatch: pytest.MonkeyPatch, registry: RegistryTwin, brokers: BrokerClient
) -> None:
    """Makes ``manager.app.create_app`` build over ``registry`` and ``brokers``."""
    monkeypatch.setattr(manager.app, "registry_raft", lambda _config: registry)
    monkeypatch.setattr(manager.app, "BrokerClient", lambda _limits, _token: brokers)
    monkeypatch.setattr(manager.app, "LeaderDuties", Idle)
    # Every manager added proves its address: the fuzz sends made-up addresses, which the
    # real check would call (``test_address_proof.py`` tests the check itself).
    proven = functools.partial(ClusterView, address_check=lambda _ref: None)
    monkeypatch.setattr(manager.app, "ClusterView", proven)
