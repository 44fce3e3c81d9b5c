"""Acknowledgements that say what they mean (issue 7): per-request durability and an answer
that reports what was achieved, through the load balancer and at a broker, with real
processes. (What each level survives is the power-loss test's to show.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stress_tests.polling import poll_until
from unit_tests.cluster.client_ops import create_topic, end_offset, register_producer
from unit_tests.cluster.harness import Cluster, running_cluster
from unit_tests.ports import CLUSTER_BASE_PORTS

pytestmark = pytest.mark.cluster

WAIT_S = 60.0
TOPIC = "acks"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = CLUSTER_BASE_PORTS["acknowledgements"]
    for instance in running_cluster(tmp_path_factory.mktemp("acks"), port):
        create_topic(instance, TOPIC, partitions=2)
        yield instance


@pytest.fixture(scope="module")
def producer_id(cluster: Cluster) -> str:
    return register_producer(cluster, TOPIC)


def produce(cluster: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    def attempt() -> dict[str, Any] | None:
        response = cluster.post("/logs", body)
        if response.status_code in (429, 503):
            return None
        assert response.status_code == 201, response.text
        answer: dict[str, Any] = response.json()
        return answer

    return poll_until(attempt, WAIT_S, "an acknowledgement")


@pytest.mark.parametrize(
    ("durability", "synced_min", "flushed_min"),
    [("replicated", 0, 0), ("fsync", 2, 0), ("flushed", 2, 2), (None, 2, 0)],
)
def test_each_level_reports_what_it_achieved(
    cluster: Cluster,
    producer_id: str,
    durability: str | None,
    synced_min: int,
    flushed_min: int,
) -> None:
    body: dict[str, Any] = {
        "topic": TOPIC,
        "producer_id": producer_id,
        "messages": [{"message": f"m{i}", "key": f"k{i}"} for i in range(20)],
    }
    if durability is not None:
        body["durability"] = durability
    answer = produce(cluster, body)
    acks = answer["acks"]
    assert {a["partition_id"] for a in acks} == {o["partition_id"] for o in answer["offsets"]}
    for ack in acks:
        assert ack["durability"] == (durability or "fsync")
        assert ack["raft_term"] >= 1 and ack["raft_index"] >= 1
        if durability == "replicated":
            assert ack["replicas_synced"] == 0
        else:
            assert 2 <= ack["replicas_synced"] <= 3
        assert ack["replicas_flushed"] >= flushed_min
        assert ack["replicas_synced"] >= synced_min


def test_a_single_message_answer_has_its_ack(cluster: Cluster, producer_id: str) -> None:
    answer = produce(
        cluster,
        {"topic": TOPIC, "producer_id": producer_id, "message": "one", "durability": "flushed"},
    )
    assert answer["ack"]["partition_id"] == answer["partition_id"]
    assert answer["ack"]["replicas_flushed"] >= 2


def test_an_unknown_level_is_refused_and_nothing_is_stored(
    cluster: Cluster, producer_id: str
) -> None:
    before = [end_offset(cluster, TOPIC, p) for p in (0, 1)]
    response = cluster.post(
        "/logs",
        {"topic": TOPIC, "producer_id": producer_id, "message": "x", "durability": "disk"},
    )
    assert response.status_code == 400
    assert "durability" in response.json()["message"]
    assert [end_offset(cluster, TOPIC, p) for p in (0, 1)] == before
