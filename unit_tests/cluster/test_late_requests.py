"""Requests that outlive their callers (issue 7, item 1).

When a node stalls longer than its callers wait, they retry elsewhere while the original
request is still on its way, and it may be applied much later. Two defences, each shown with
real processes:

* A late copy is recognised however late it comes. A pop used to be compared with its
  consumer's last request id only, so a late copy of an older pop claimed a fresh range that
  nobody received: the queue skipped messages. Pops now carry increasing sequences; the copy
  is refused (409) and claims nothing. (The late copy is sent here as a stalled manager would
  send it on resuming: straight to the partition leader's broker, after newer pops.)
* The deadline travels with the request (``X-RaftQ-Timeout-Ms``): with two brokers of three
  stopped, a produce whose client waits 1.5 s is answered by the manager when that deadline
  passes, saying so, instead of the manager trying broker after broker for 10 s each while
  the load balancer has long given up.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import (
    create_topic,
    end_offset,
    partition_brokers,
    partition_leader,
    produce,
    register_consumer,
    register_producer,
)
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
PATIENT_S = 30.0
"""The test's own HTTP timeout: generous, so that only the server's deadline answers."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["late_requests"]
    yield from running_cluster(tmp_path_factory.mktemp("late"), port)


def pop_via_lb(cluster: Cluster, consumer: str, request_id: str, sequence: int) -> list[int]:
    def attempt() -> list[int] | None:
        response = cluster.get(
            "/logs", consumer_id=consumer, max_messages=10, request_id=request_id, sequence=sequence
        )
        if response.status_code in (429, 503):
            return None
        assert response.status_code == 200, response.text
        return [m["offset"] for m in response.json()["messages"]]

    return poll_until(attempt, WAIT_S, f"pop {request_id}")


def test_a_late_copy_of_an_older_pop_claims_nothing(cluster: Cluster) -> None:
    create_topic(cluster, "late-pops")
    register_producer(cluster, "late-pops", "p")
    produce(cluster, "p", 1, [(None, f"m{i}") for i in range(30)], topic="late-pops")
    consumer = register_consumer(cluster, "late-pops")
    assert pop_via_lb(cluster, consumer, "a", 100) == list(range(10))
    assert pop_via_lb(cluster, consumer, "b", 200) == list(range(10, 20))

    leader = cluster.broker_url(partition_leader(cluster, "late-pops", 0))
    late = cluster.http.get(
        f"{leader}/logs",
        params={
            "topic": "late-pops",
            "partition_id": "0",
            "consumer_id": consumer,
            "max_messages": "10",
            "request_id": "a",
            "sequence": "100",
        },
        timeout=PATIENT_S,
    )
    assert late.status_code == 409, late.text
    assert late.json()["error_code"] == 40902

    assert pop_via_lb(cluster, consumer, "c", 300) == list(range(20, 30)), "nothing skipped"


def test_a_late_copy_of_an_older_batch_appends_nothing(cluster: Cluster) -> None:
    create_topic(cluster, "late-batches")
    register_producer(cluster, "late-batches", "q")
    first = produce(cluster, "q", 1, [(None, "first")], topic="late-batches")
    for sequence in range(2, 12):
        produce(cluster, "q", sequence, [(None, f"m{sequence}")], topic="late-batches")
    leader = cluster.broker_url(partition_leader(cluster, "late-batches", 0))
    body = {"topic": "late-batches", "partition_id": 0, "producer_id": "q", "sequence": 1}
    late = cluster.http.post(
        f"{leader}/logs", json={**body, "messages": [{"message": "first"}]}, timeout=PATIENT_S
    )
    if late.status_code == 201:  # still remembered: the original offsets
        assert late.json()["offsets"] == [first[0].offset]
    else:  # forgotten: refused as older than the producer's last sequence
        assert late.status_code == 409, late.text
    assert end_offset(cluster, "late-batches", 0) == 11


def test_the_manager_stops_at_its_callers_deadline(cluster: Cluster) -> None:
    create_topic(cluster, "deadline")
    producer = register_producer(cluster, "deadline")
    body: dict[str, Any] = {
        "topic": "deadline",
        "producer_id": producer,
        "sequence": 1,
        "messages": [{"message": "x"}],
    }
    stopped = partition_brokers(cluster, "deadline")[0][:2]
    for broker_id in stopped:
        cluster.kill(cluster.broker_name(broker_id), signal.SIGSTOP)
    try:
        answer = cluster.http.post(
            f"{cluster.lb_url}/logs",
            json=body,
            headers={"X-RaftQ-Timeout-Ms": "1500"},
            timeout=PATIENT_S,
        )
    finally:
        for broker_id in stopped:
            cluster.kill(cluster.broker_name(broker_id), signal.SIGCONT)
    assert answer.status_code == 503, answer.text
    assert "deadline passed" in answer.json()["message"]

    acked = poll_until(lambda: _produced(cluster, body), WAIT_S, "the retried batch")
    assert acked == [0], "the retry with the same sequence is stored once"


def _produced(cluster: Cluster, body: dict[str, Any]) -> list[int] | None:
    response = cluster.post("/logs", body)
    if response.status_code != 201:
        return None
    return [o["offset"] for o in response.json()["offsets"]]
