"""Sequences move forward within a bound (issue 23, hole 4): a pop far ahead of the broker's
clock, or a batch far past its producer's last, is refused before anything is proposed, so
one request cannot lock a consumer or a producer out for good. Over the production app on
in-memory twins (as a node: the id rules are tested with real processes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.persistence.store import MemoryMessageStore
from protocol.limits import Limits
from runtime.http_api import App
from runtime.http_server import HttpRequest, HttpResponse
from unit_tests.broker.in_memory_broker import as_node, broker_app

LIMITS = Limits()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with broker_app(tmp_path, MemoryMessageStore(), LIMITS) as (app, _service):
        url = "http://127.0.0.1:1"
        replica = {"replica_id": 0, "broker_id": 1, "address": url, "raft_address": "127.0.0.1:1"}
        spec = {"topic": "t", "partition_id": 0, "replica_id": 0, "replicas": [replica]}
        assert _call(app, "POST", "/partitions", spec).status == 201
        yield app


def _call(app: App, method: str, target: str, body: object = None) -> HttpResponse:
    raw = b"" if body is None else orjson.dumps(body)
    return app.handle(HttpRequest(method, target, as_node(method, target, raw), raw))


def _produce(app: App, sequence: int, value: str) -> HttpResponse:
    body = {"topic": "t", "partition_id": 0, "messages": [{"message": value}]}
    return _call(app, "POST", "/logs", body | {"producer_id": "p", "sequence": sequence})


def _pop(app: App, sequence: int) -> HttpResponse:
    target = f"/logs?topic=t&partition_id=0&consumer_id=c&max_messages=5&sequence={sequence}"
    return _call(app, "GET", target)


def test_a_pop_far_ahead_of_the_clock_is_refused_and_claims_nothing(app: App) -> None:
    for value in ("a", "b"):
        assert _produce(app, ord(value), value).status == 201
    refused = _pop(app, 2**63 - 1)
    assert refused.status == 400 and b"pop_sequence_ahead_s_max" in refused.body
    now_us = time.time_ns() // 1000
    assert _pop(app, now_us + int(LIMITS.pop_sequence_ahead_s_max * 1e6) * 2).status == 400
    popped = _pop(app, now_us)  # the consumer's next pop is served: it was not locked out
    assert popped.status == 200
    assert [m["message"] for m in orjson.loads(popped.body)["messages"]] == ["a", "b"]


def test_a_batch_far_past_its_producers_last_sequence_is_refused(app: App) -> None:
    assert _produce(app, 7, "first").status == 201
    refused = _produce(app, 7 + LIMITS.producer_sequence_step_max + 1, "far")
    assert refused.status == 400 and b"producer_sequence_step_max" in refused.body
    assert _produce(app, 7 + LIMITS.producer_sequence_step_max, "within").status == 201
    assert _produce(app, 8 + LIMITS.producer_sequence_step_max, "next").status == 201
    read = _call(app, "GET", "/logs?topic=t&partition_id=0&offset=0&max_messages=10")
    assert [m["message"] for m in orjson.loads(read.body)["messages"]] == [
        "first",
        "within",
        "next",
    ]
