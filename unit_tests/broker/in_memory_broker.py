"""The broker's own ``create_app`` over in-memory twins: the message store, a
``partition_twin`` for each replica's Raft group, and registration with the managers not
started. Everything else (routes, access, the error mapping, metrics) is the production
wiring. Used by the API fuzzing and the route tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import broker.app
from broker.config import BrokerConfig
from broker.partition.raft import PartitionTwin, partition_twin
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.limits import Limits
from protocol.types import ReplicaSpec
from raftq.node_signing import NodeSigning
from runtime.http_api import App
from unit_tests.manager.in_memory_app import Idle
from unit_tests.node_signing import TEST_NODE, signed

SECRET = "in-memory-cluster-secret"
AS_NODE = NodeSigning.of(SECRET, TEST_NODE)
"""Signs a ``requests`` call as a node (``auth=AS_NODE``)."""


def as_node(method: str, target: str, body: bytes = b"", port: int = 1) -> list[tuple[str, str]]:
    """The headers of a node's request to the broker ``broker_app`` built on ``port``."""
    return signed(SECRET, f"http://127.0.0.1:{port}", method, target, body)


def _twin(spec: ReplicaSpec, _replica_dir: str, _secret: str, limits: Limits) -> PartitionTwin:
    partition_limits = spec.limits or limits.partition_limits()
    return partition_twin(f"{spec.topic}/{spec.partition_id}", len(spec.replicas), partition_limits)


@contextmanager
def broker_app(
    data_dir: Path,
    store: MemoryMessageStore,
    limits: Limits,
    port: int = 1,
    metrics_token: str | None = None,
) -> Iterator[tuple[App, BrokerService]]:
    """The app and its service; the twins stay patched in while it is used (the broker
    builds a replica's Raft group when ``POST /partitions`` asks, long after ``create_app``)."""
    services: list[BrokerService] = []

    def keeping(*args: Any) -> BrokerService:
        services.append(BrokerService(*args))
        return services[-1]

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(broker.app, "SqlMessageStore", lambda _url: store)
        monkeypatch.setattr(broker.app, "partition_raft", _twin)
        monkeypatch.setattr(broker.app, "Registration", Idle)
        monkeypatch.setattr(logging, "basicConfig", lambda **_kwargs: None)
        monkeypatch.setattr(broker.app, "BrokerService", keeping)
        config = BrokerConfig(
            broker_id=1,
            host="127.0.0.1",
            port=port,
            raft_port_min=1,  # unused: the twins open no port
            raft_port_max=2,
            data_dir=str(data_dir),
            db_url="unused",
            managers=("http://127.0.0.1:1",),  # unused: registration is not started
            secret=SECRET,
            limits=limits,
            metrics_token=metrics_token,
        )
        app = broker.app.create_app(config)
        try:
            yield app, services[0]
        finally:
            app.close()
