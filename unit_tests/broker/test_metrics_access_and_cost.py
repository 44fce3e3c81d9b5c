"""A broker's ``/metrics`` (issue 23, hole 3), over the production app on in-memory twins:
who may read it, and a scrape whose cost does not grow with the consumers or the made-up
methods callers send."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from broker.persistence.store import MemoryMessageStore
from broker.service import BrokerService
from protocol.access import AUTHORIZATION_HEADER
from protocol.limits import Limits
from runtime.http_api import App
from runtime.http_server import HttpRequest, HttpResponse
from unit_tests.broker.in_memory_broker import as_node, broker_app

CONSUMERS_SHOWN = 3
LIMITS = Limits(metrics_consumers_per_partition_max=CONSUMERS_SHOWN, metrics_refresh_s=3600.0)
AS_NODE_HEADERS = None
"""``_call``'s headers for a request signed as a node."""
SCRAPE_TOKEN = "scrape-token-of-this-broker"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[App, BrokerService]]:
    """A broker started with ``--metrics-token-file`` (``SCRAPE_TOKEN``)."""
    with broker_app(tmp_path, MemoryMessageStore(), LIMITS, metrics_token=SCRAPE_TOKEN) as (
        app,
        service,
    ):
        url = "http://127.0.0.1:1"
        spec = {
            "topic": "orders",
            "partition_id": 0,
            "replica_id": 0,
            "replicas": [
                {"replica_id": 0, "broker_id": 1, "address": url, "raft_address": "127.0.0.1:1"}
            ],
        }
        assert _call(app, "POST", "/partitions", AS_NODE_HEADERS, spec).status == 201
        produce = {"topic": "orders", "partition_id": 0, "messages": [{"message": "m"}] * 40}
        assert _call(app, "POST", "/logs", AS_NODE_HEADERS, produce).status == 201
        yield app, service


def _call(
    app: App, method: str, target: str, headers: list[tuple[str, str]] | None, body: object = None
) -> HttpResponse:
    raw = b"" if body is None else orjson.dumps(body)
    sent = as_node(method, target, raw) if headers is None else headers
    return app.handle(HttpRequest(method, target, sent, raw))


def _scrape(app: App, headers: list[tuple[str, str]] | None) -> str:
    response = _call(app, "GET", "/metrics", headers)
    assert response.status == 200, response.body
    return response.body.decode()


def test_an_unauthenticated_scrape_is_refused_and_shows_nothing(
    broker: tuple[App, BrokerService],
) -> None:
    app, _ = broker
    for headers in ([], [(AUTHORIZATION_HEADER, "Bearer not-the-token-at-all")]):
        refused = _call(app, "GET", "/metrics", headers)
        assert refused.status == 401 and b"orders" not in refused.body
    shown = _scrape(app, [(AUTHORIZATION_HEADER, f"Bearer {SCRAPE_TOKEN}")])
    assert 'topic="orders"' in shown
    # The scrape token reads /metrics and nothing else.
    other = _call(app, "GET", "/logs?topic=orders&partition_id=0&offset=0", [
        (AUTHORIZATION_HEADER, f"Bearer {SCRAPE_TOKEN}")
    ])  # fmt: skip
    assert other.status == 403


def test_a_scrape_costs_the_same_however_many_consumers_pop(
    broker: tuple[App, BrokerService], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, service = broker
    for i in range(30):  # made by whoever holds a consumer key
        pop = f"/logs?topic=orders&partition_id=0&consumer_id=c{i:02}&max_messages={1 + i % 7}"
        assert _call(app, "GET", pop, AS_NODE_HEADERS).status == 200
    reads: list[tuple[int, int]] = []
    real_read = service._read

    def counted(replica: Any, start: int, end: int, **kwargs: Any) -> Any:
        reads.append((start, end))
        return real_read(replica, start, end, **kwargs)

    monkeypatch.setattr(service, "_read", counted)
    text = _scrape(app, AS_NODE_HEADERS)
    lag = "raftq_broker_consumer_lag_messages{"
    shown = sorted(line for line in text.splitlines() if line.startswith(lag))
    # The most lagging ones (one message popped: c00, c07, c14 first by id), no more.
    assert [line.split('"')[1] for line in shown] == ["c00", "c07", "c14"], shown
    assert 'raftq_broker_partition_consumers{partition="0",topic="orders"} 30.0' in text
    # One read per consumer shown, for its age, and one for the partition's own (groups).
    assert len(reads) == CONSUMERS_SHOWN + 1
    for _ in range(5):  # scraped again within metrics_refresh_s: no read at all
        _scrape(app, AS_NODE_HEADERS)
    assert len(reads) == CONSUMERS_SHOWN + 1


def test_made_up_methods_add_no_series(broker: tuple[App, BrokerService]) -> None:
    app, _ = broker
    for i in range(20):
        _call(app, f"BREW{i}", "/logs", [])
    text = _scrape(app, AS_NODE_HEADERS)
    assert "BREW" not in text and 'method="other"' in text
