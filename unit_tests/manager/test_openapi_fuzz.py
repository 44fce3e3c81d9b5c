"""The manager's API fuzzed with schemathesis from its own document (``GET /openapi.json``).

The server is the manager's ``create_app`` in this process (``in_memory_app``: the in-memory
registry twin, brokers stubbed with answers shaped as the broker document says), served by
``runtime.http_server`` on a free port. Every generated request, valid and invalid
(schemathesis' positive and negative modes), must get: no 5xx other than a refusal that
proves nothing was done; a status, content type, headers and body the document describes;
and, for every answer that proves nothing was done (every 4xx, those 503s), nothing stored:
the registry's revision and commands, and the brokers' writes, unchanged.

Bounded: a fixed number of examples per operation, derandomized (the same run every time),
a timeout per request (no deadline per example: a loaded machine may take seconds); the
whole module takes a few seconds on a quiet one.
"""

from __future__ import annotations

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

from manager.app import create_app
from manager.broker_client import BrokerClient
from manager.raft import RegistryTwin, registry_twin
from protocol.deadline import Deadline
from protocol.errors import ErrorCode
from protocol.limits import Limits
from protocol.openapi import Node
from protocol.types import Offset, PartitionId, ReplicaSpec, StoredMessage
from runtime.http_api import server_limits
from runtime.http_client import HttpAnswer, PeerLink
from runtime.http_server import HttpServer
from unit_tests.manager.in_memory_app import AS_NODE, manager_config, patch_manager
from unit_tests.openapi_fuzzing import error_code_in, fuzz_schema, judge
from unit_tests.ports import free_port

LIMITS = Limits()
EXAMPLES_PER_OPERATION = 30
REFUSALS_5XX = {
    ErrorCode.REFUSED.value,
    ErrorCode.NOT_ENOUGH_BROKERS.value,
    ErrorCode.NOT_LEADER.value,
}
"""The only 5xx a healthy single manager may answer: a refusal before anything is proposed
(a routing count above the topic's active partitions; too few brokers or Raft ports for a
topic's replicas; asked to remove itself from the managers, it hands leadership over)."""

SCHEMA = fuzz_schema(Node.MANAGER, EXAMPLES_PER_OPERATION)


class StubBrokers(BrokerClient):
    """Every broker takes every request and answers as the broker document says, keeping
    one log per partition; what it stored is counted in ``writes``."""

    def __init__(self) -> None:
        super().__init__(LIMITS, PeerLink(None, None))
        self._lock = threading.Lock()
        self.writes = 0
        self._logs: dict[tuple[str, int], list[str]] = {}
        self._offsets: dict[tuple[str, int, str], int] = {}

    def host_replica(self, address: str, spec: ReplicaSpec) -> None:
        with self._lock:
            self.writes += 1

    def produce(
        self, address: str, body: dict[str, object], deadline: Deadline | None = None
    ) -> HttpAnswer:
        topic, partition_id = str(body["topic"]), int(str(body["partition_id"]))
        messages = body["messages"]
        assert isinstance(messages, list)
        with self._lock:
            self.writes += 1
            log = self._logs.setdefault((topic, partition_id), [])
            offsets = list(range(len(log), len(log) + len(messages)))
            log.extend(str(m["message"]) for m in messages)
        ack = {
            "partition_id": partition_id,
            "durability": body["durability"],
            "raft_term": 1,
            "raft_index": self.writes,
            "replicas_synced": 3,
            "replicas_flushed": 0,
        }
        return HttpAnswer(201, {"partition_id": partition_id, "offsets": offsets, "ack": ack}, {})

    def read(
        self, address: str, params: dict[str, str], deadline: Deadline | None = None
    ) -> HttpAnswer:
        topic, partition_id = params["topic"], int(params["partition_id"])
        count = int(params["max_messages"])
        with self._lock:
            log = self._logs.get((topic, partition_id), [])
            if "consumer_id" in params:  # a pop: the consumer's offset moves
                self.writes += 1
                key = (topic, partition_id, params["consumer_id"])
                start = self._offsets.get(key, 0)
                self._offsets[key] = min(start + count, len(log))
            else:
                start = int(params["offset"])
            found = [
                StoredMessage(
                    offset=Offset(offset), key=None, value=log[offset], timestamp_ms=1
                ).to_json(topic, PartitionId(partition_id))
                for offset in range(start, min(start + count, len(log)))
            ]
        return HttpAnswer(200, {"messages": found}, {})


@dataclass(frozen=True)
class Running:
    url: str
    registry: RegistryTwin
    brokers: StubBrokers

    def stored(self) -> tuple[bytes, int]:
        """What a request that did nothing must leave as it was: the registry's whole state
        and the brokers' writes. (Not the list of commands: a registration refused in apply,
        like a client id already registered for another topic, is proposed and changes
        nothing.)"""
        return self.registry.read(pickle.dumps), self.brokers.writes


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    registry, brokers = registry_twin(), StubBrokers()
    port = free_port()
    with pytest.MonkeyPatch.context() as monkeypatch:  # for the whole module, to be safe
        patch_manager(monkeypatch, registry, brokers)
        data_dir = Path(tmp_path_factory.mktemp("manager"))
        app = create_app(manager_config(data_dir, LIMITS, port, free_port()))
        server = HttpServer("127.0.0.1", port, app.handle, server_limits(LIMITS))
        thread = threading.Thread(target=server.serve_forever, name="fuzzed-manager", daemon=True)
        thread.start()
        running = Running(f"http://127.0.0.1:{port}", registry, brokers)
        _seed(running.url)
        try:
            yield running
        finally:
            server.shutdown()
            thread.join()
            app.close()


def _seed(url: str) -> None:
    """Brokers, and the topic, producer and consumer the document's examples name, so that
    generated requests also reach the paths behind a successful lookup."""
    for broker_id in (1, 2, 3):
        _post(
            url,
            "/brokers",
            {
                "broker_id": broker_id,
                "address": f"http://broker-{broker_id}",
                "raft_host": f"host-{broker_id}",
                "raft_port_min": 1,
                "raft_port_max": 65535,
            },
        )
    _post(url, "/topics", {"name": "orders", "partitions": 3})
    _post(url, "/producers", {"topic": "orders", "producer_id": "producer-1"})
    _post(url, "/consumers", {"topic": "orders", "consumer_id": "consumer-1"})


def _post(url: str, path: str, body: dict[str, object]) -> None:
    answer = requests.post(url + path, json=body, timeout=10, auth=AS_NODE)
    assert answer.status_code in (200, 201), answer.text


@SCHEMA.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,  # a loaded machine: each request is bounded by its own timeout instead
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_manager_api_holds_to_its_document(case: Case[Any], fuzzed: Running) -> None:
    before = fuzzed.stored()
    response = case.call(base_url=fuzzed.url, timeout=10, auth=AS_NODE)
    if judge(case, response, error_code_in(REFUSALS_5XX)):
        assert fuzzed.stored() == before, f"{response.status_code} {response.text} changed state"
