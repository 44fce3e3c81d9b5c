"""The broker's API fuzzed with schemathesis from its own document (``GET /openapi.json``).

The server is the broker's ``create_app`` in this process over in-memory twins (the message
store, and ``partition_twin`` for each replica's Raft group; registration with the managers
not started), served by ``runtime.http_server`` on a free port. The checks are the manager's
(``unit_tests/manager/test_openapi_fuzz.py``): no 5xx other than refusals, answers as the
document describes, invalid input refused, and nothing stored by an answer that proves
nothing was done (the hosted replicas, and each partition's end offset, consumers,
producers and consumer groups).
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

from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.errors import ErrorCode
from protocol.limits import Limits
from protocol.openapi import Node
from runtime.http_api import App, server_limits
from runtime.http_server import HttpServer
from unit_tests.broker.in_memory_broker import AS_NODE, broker_app
from unit_tests.openapi_fuzzing import error_code_in, fuzz_schema, judge
from unit_tests.ports import free_port

LIMITS = Limits(stream_s_max=0.5, stream_heartbeat_s=0.2)
"""A stream ends well within a fuzzed call's request timeout (one that did not end would
hang the test until pytest's timeout)."""
EXAMPLES_PER_OPERATION = 30
REFUSALS_5XX = {ErrorCode.REFUSED.value}
"""The only 5xx a broker over its twins may answer: a refusal before anything is proposed."""

SCHEMA = fuzz_schema(Node.BROKER, EXAMPLES_PER_OPERATION)


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
            r.partition.read(lambda log: (log.end_offset, log.consumers, log.producers, log.groups))
            for r in replicas
        ]
        return pickle.dumps((self.store.load_replicas(), partitions))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    store = MemoryMessageStore()
    port = free_port()
    data_dir = Path(tmp_path_factory.mktemp("broker"))
    with broker_app(data_dir, store, LIMITS, port) as (app, service):
        server = HttpServer("127.0.0.1", port, app.handle, server_limits(LIMITS))
        thread = threading.Thread(target=server.serve_forever, name="fuzzed-broker", daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{port}"
        _seed(url)
        try:
            yield Running(url, app, store, service)
        finally:
            server.shutdown()
            thread.join()


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
def test_broker_api_holds_to_its_document(case: Case[Any], fuzzed: Running) -> None:
    before = fuzzed.stored()
    response = case.call(base_url=fuzzed.url, timeout=10, auth=AS_NODE)
    if judge(case, response, error_code_in(REFUSALS_5XX)):
        assert fuzzed.stored() == before, f"{response.status_code} {response.text} changed state"
