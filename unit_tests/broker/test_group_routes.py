"""A broker's ``/groups/{group}/...`` routes in process (issue 20): receive with the
group's settings, then ack, nack and extend by receipt, over the production app on
in-memory twins. Refusals leave the group as it was."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.errors import ErrorCode
from protocol.limits import Limits
from runtime.http_api import App
from runtime.http_server import HttpRequest
from unit_tests.broker.in_memory_broker import as_node, broker_app

LIMITS = Limits()
SETTINGS = "visibility_timeout_ms=60000&max_deliveries=3&ordering=none"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[App, BrokerService]]:
    with broker_app(tmp_path, MemoryMessageStore(), LIMITS) as (app, service):
        url = "http://127.0.0.1:1"
        spec = {
            "topic": "orders",
            "partition_id": 0,
            "replica_id": 0,
            "replicas": [
                {"replica_id": 0, "broker_id": 1, "address": url, "raft_address": "127.0.0.1:1"}
            ],
        }
        assert _call(app, "POST", "/partitions", spec)[0] == 201
        produce = {"topic": "orders", "partition_id": 0, "messages": [{"message": "m"}] * 4}
        assert _call(app, "POST", "/logs", produce)[0] == 201
        yield app, service


def _call(app: App, method: str, target: str, body: object = None) -> tuple[int, dict[str, object]]:
    raw = b"" if body is None else orjson.dumps(body)
    response = app.handle(HttpRequest(method, target, as_node(method, target, raw), raw))
    return response.status, orjson.loads(response.body)


def _receive(app: App, n: int) -> list[tuple[int, int, str]]:
    target = f"/groups/workers/messages?topic=orders&partition_id=0&max_messages={n}&{SETTINGS}"
    status, body = _call(app, "GET", target)
    assert status == 200, body
    messages = body["messages"]
    assert isinstance(messages, list)
    return [(m["offset"], m["delivery_count"], m["receipt"]) for m in messages]


def _settle(app: App, action: str, receipts: list[str], **extra: object) -> object:
    body = {"topic": "orders", "partition_id": 0, "receipts": receipts, **extra}
    status, answer = _call(app, "POST", f"/groups/workers/{action}", body)
    assert status == 200, answer
    return [(o["receipt"], o["outcome"]) for o in answer["outcomes"]]  # type: ignore[attr-defined]


def test_receive_ack_nack_and_a_stale_receipt(broker: tuple[App, BrokerService]) -> None:
    app, _ = broker
    assert _receive(app, 2) == [(0, 1, "0.0.1"), (1, 1, "0.1.1")]
    assert _settle(app, "ack", ["0.0.1"]) == [("0.0.1", "done")]
    assert _settle(app, "ack", ["0.0.1"]) == [("0.0.1", "already")]
    assert _settle(app, "nack", ["0.1.1"], delay_ms=0) == [("0.1.1", "done")]
    assert _receive(app, 2) == [(1, 2, "0.1.2"), (2, 1, "0.2.1")]
    assert _settle(app, "ack", ["0.1.1", "0.9.1"]) == [("0.1.1", "stale"), ("0.9.1", "unknown")]
    extended = _settle(app, "extend", ["0.1.2"], visibility_timeout_ms=120_000)
    assert extended == [("0.1.2", "done")]


@pytest.mark.parametrize(
    ("action", "body", "status", "code"),
    [
        ("ack", {"receipts": ["1.0.1"]}, 400, ErrorCode.INVALID_FIELD),  # another partition
        ("ack", {"receipts": ["0.0"]}, 400, ErrorCode.INVALID_FIELD),
        ("ack", {"receipts": ["0.0.0"]}, 400, ErrorCode.INVALID_FIELD),  # no delivery 0
        ("ack", {"receipts": []}, 400, ErrorCode.INVALID_FIELD),
        ("ack", {"receipts": [7]}, 400, ErrorCode.INVALID_FIELD),
        ("extend", {"receipts": ["0.0.1"]}, 400, ErrorCode.INVALID_FIELD),  # no timeout
        ("nack", {"receipts": ["0.0.1"], "delay_ms": -1}, 400, ErrorCode.INVALID_FIELD),
        ("settle", {"receipts": ["0.0.1"]}, 404, ErrorCode.NOT_FOUND),
    ],
)
def test_a_refused_settle_changes_nothing(
    broker: tuple[App, BrokerService],
    action: str,
    body: dict[str, object],
    status: int,
    code: ErrorCode,
) -> None:
    app, service = broker
    _receive(app, 2)
    before = _groups(service)
    got, answer = _call(
        app, "POST", f"/groups/workers/{action}", {"topic": "orders", "partition_id": 0, **body}
    )
    assert (got, answer["error_code"]) == (status, code.value), answer
    assert _groups(service) == before


@pytest.mark.parametrize(
    "query",
    [
        "topic=orders&partition_id=0&max_deliveries=3",  # no visibility timeout
        "topic=orders&partition_id=0&visibility_timeout_ms=1&max_deliveries=3",  # too short
        "topic=orders&partition_id=0&visibility_timeout_ms=60000&max_deliveries=3&ordering=fifo",
        f"topic=orders&partition_id=0&{SETTINGS}&max_messages=0",
    ],
)
def test_a_receive_with_bad_settings_is_refused_and_leases_nothing(
    broker: tuple[App, BrokerService], query: str
) -> None:
    app, service = broker
    before = _groups(service)
    status, answer = _call(app, "GET", f"/groups/workers/messages?{query}")
    assert status == 400 and answer["error_code"] == ErrorCode.INVALID_FIELD.value, answer
    assert _groups(service) == before


def test_a_group_name_follows_the_topic_name_rule(broker: tuple[App, BrokerService]) -> None:
    app, _ = broker
    target = f"/groups/bad%20name/messages?topic=orders&partition_id=0&{SETTINGS}"
    status, answer = _call(app, "GET", target)
    assert status == 400 and answer["error_code"] == ErrorCode.INVALID_FIELD.value


def _groups(service: BrokerService) -> bytes:
    with service._lock:  # private: the test reads the hosted replica's state
        replica = next(iter(service._replicas.values()))
    return pickle.dumps(replica.partition.read(lambda log: log.groups))


def test_a_groups_figures_count_what_it_has_not_settled(
    broker: tuple[App, BrokerService],
) -> None:
    app, _ = broker
    held = _receive(app, 3)
    _settle(app, "ack", [held[0][2]])
    _settle(app, "nack", [held[1][2]])
    status, body = _call(app, "GET", "/groups?topic=orders")
    assert status == 200, body
    groups, partitions = body["groups"], body["partitions"]
    assert isinstance(groups, list) and isinstance(partitions, list)
    (group,) = groups
    assert {k: group[k] for k in ("group", "offset", "end_offset", "lag_messages")} == {
        "group": "workers",
        "offset": 1,  # offset 0 is settled
        "end_offset": 4,
        "lag_messages": 3,  # 1 waiting again, 1 leased, 1 never delivered
    }
    assert (group["in_flight"], group["dead_letters_pending"]) == (1, 0)
    assert group["lag_s"] >= 0
    (own,) = partitions
    assert (own["group"], own["offset"], own["lag_messages"], own["in_flight"]) == (None, 0, 4, 0)
    metrics = app.handle(HttpRequest("GET", "/metrics", as_node("GET", "/metrics"))).body.decode()
    labels = 'group="workers",partition="0",topic="orders"'
    assert f"group_lag_messages{{{labels}}} 3.0" in metrics
    assert f"group_in_flight_messages{{{labels}}} 1.0" in metrics
    assert f"group_dead_letters_pending{{{labels}}} 0.0" in metrics
