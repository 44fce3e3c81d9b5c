"""The broker's API fuzzed with schemathesis from its own document (``GET /openapi.json``).

The server is the broker's ``create_app`` in this process over in-memory twins (the message
store, and ``MemoryConsensus`` for each replica's Raft group; registration with the managers
not started), served by ``runtime.http_server`` on a free port. The checks are the manager's
(``unit_tests/manager/test_openapi_fuzz.py``): no 5xx other than refusals, answers as the
document describes, invalid input refused, and nothing stored by an answer that proves
nothing was done (the hosted replicas, and each partition's end offset, consumers and
producers).
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, settings
from schemathesis import Case

import broker.app
from broker.config import BrokerConfig
from broker.partition.consensus import MemoryConsensus
from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.access import NODE_HEADER, node_token
from protocol.errors import ErrorCode
from protocol.limits import Limits
from protocol.openapi import Node
from protocol.types import ReplicaSpec
from runtime.http_api import App, server_limits
from runtime.http_server import HttpServer
from unit_tests.manager.in_memory_app import Idle
from unit_tests.openapi_fuzzing import error_code_in, fuzz_schema, judge
from unit_tests.ports import free_port

LIMITS = Limits()
SECRET = "in-memory-cluster-secret"
AS_NODE = {NODE_HEADER: node_token(SECRET)}
EXAMPLES_PER_OPERATION = 30
REFUSALS_5XX = {ErrorCode.REFUSED.value}
"""The only 5xx a broker over its twins may answer: a refusal before anything is proposed."""

SCHEMA = fuzz_schema(Node.BROKER, EXAMPLES_PER_OPERATION)


def _twin(spec: ReplicaSpec, _replica_dir: str, _secret: str, limits: Limits) -> MemoryConsensus:
    partition_limits = spec.limits or limits.partition_limits()
    return MemoryConsensus(
        f"{spec.topic}/{spec.partition_id}", len(spec.replicas), partition_limits
    )


@dataclass(frozen=True)
class Running:
    url: str
    app: App
    store: MemoryMessageStore
    service: BrokerService

    def stored(self) -> bytes:
        """What a request that did nothing must leave as it was. Not the flushed offsets:
        each replica's flusher moves them on its own."""
        with self.service._lock:  # private: the test reads every hosted replica's state
            replicas = list(self.service._replicas.values())
        partitions = [
            r.partition.read(lambda log: (log.end_offset, log.consumers, log.producers))
            for r in replicas
        ]
        return pickle.dumps((self.store.load_replicas(), partitions))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    store = MemoryMessageStore()
    services: list[BrokerService] = []
    port = free_port()
    # Patched for the whole module: the broker builds a replica's Raft group (here its twin)
    # when POST /partitions asks, long after create_app.
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(broker.app, "SqlMessageStore", lambda _url: store)
        monkeypatch.setattr(broker.app, "PartitionRaft", _twin)
        monkeypatch.setattr(broker.app, "Registration", Idle)
        monkeypatch.setattr(logging, "basicConfig", lambda **_kwargs: None)
        monkeypatch.setattr(broker.app, "BrokerService", _keeping(services))
        data_dir = Path(tmp_path_factory.mktemp("broker"))
        config = BrokerConfig(
            broker_id=1,
            host="127.0.0.1",
            port=port,
            raft_port_min=1,  # unused: the twins open no port
            raft_port_max=2,
            data_dir=str(data_dir),
            db_url="unused",
            managers_url="http://127.0.0.1:1",  # unused: registration is not started
            secret=SECRET,
            limits=LIMITS,
        )
        app = broker.app.create_app(config)
        server = HttpServer("127.0.0.1", port, app.handle, server_limits(LIMITS))
        thread = threading.Thread(target=server.serve_forever, name="fuzzed-broker", daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        _seed(url)
        try:
            yield Running(url, app, store, services[0])
        finally:
            server.shutdown()
            thread.join()
            app.close()


def _keeping(services: list[BrokerService]) -> Any:
    def build(*args: Any) -> BrokerService:
        services.append(BrokerService(*args))
        return services[-1]

    return build


def _seed(url: str) -> None:
    """The partition the document's examples name, hosted by a group of one (so every
    durability level is reached), with a few messages."""
    spec = {
        "topic": "orders",
        "partition_id": 0,
        "replica_id": 0,
        "replicas": [
            {"replica_id": 0, "broker_id": 1, "address": url, "raft_address": "127.0.0.1:1"}
        ],
    }
    for path, body in (
        ("/partitions", spec),
        ("/logs", {"topic": "orders", "partition_id": 0, "messages": [{"message": "m"}] * 3}),
    ):
        answer = requests.post(url + path, json=body, timeout=10, headers=AS_NODE)
        assert answer.status_code in (200, 201), answer.text


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=5_000,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_broker_api_holds_to_its_document(case: Case[Any], fuzzed: Running) -> None:
    before = fuzzed.stored()
    response = case.call(base_url=fuzzed.url, timeout=10, headers=AS_NODE)
    if judge(case, response, error_code_in(REFUSALS_5XX)):
        assert fuzzed.stored() == before, f"{response.status_code} {response.text} changed state"
