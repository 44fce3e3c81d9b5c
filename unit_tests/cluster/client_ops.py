"""Raw HTTP operations the cluster tests share: produce with retries of the same sequence,
pop until empty, and reading a partition from one replica's broker."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from protocol.errors import proves_nothing_done
from stress_tests import cluster_view, final_read
from stress_tests.history import Entry
from stress_tests.polling import poll_until
from unit_tests.cluster.harness import Cluster

RETRY_STATUSES = (429, 500, 502, 503, 504)


@dataclass(frozen=True)
class Ack:
    value: str
    key: str | None
    partition_id: int
    offset: int


def produce(
    cluster: Cluster,
    producer_id: str,
    sequence: int,
    messages: Sequence[tuple[str | None, str]],
    *,
    topic: str,
    partition_id: int | None = None,
    deadline_s: float = 30.0,
    durability: str | None = None,
    headers: Callable[[int], dict[str, str]] | None = None,
) -> list[Ack]:
    """Send one batch, retrying the same ``(producer_id, sequence)`` until it is acked;
    ``headers`` gives the i-th message's headers."""
    body: dict[str, Any] = {
        "producer_id": producer_id,
        "topic": topic,
        "sequence": sequence,
        "messages": [
            {"message": value, "key": key, "headers": {} if headers is None else headers(i)}
            for i, (key, value) in enumerate(messages)
        ],
    }
    if partition_id is not None:
        body["partition_id"] = partition_id
    if durability is not None:
        body["durability"] = durability
    deadline = time.monotonic() + deadline_s
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            response = cluster.post("/logs", body)
        except requests.RequestException as exc:
            last = repr(exc)
        else:
            if response.status_code == 201:
                offsets = response.json()["offsets"]
                return [
                    Ack(value, key, o["partition_id"], o["offset"])
                    for (key, value), o in zip(messages, offsets, strict=True)
                ]
            if response.status_code not in RETRY_STATUSES:
                raise AssertionError(f"produce refused: {response.status_code} {response.text}")
            last = f"{response.status_code} {response.text}"
        time.sleep(0.1)
    raise AssertionError(f"batch {producer_id}/{sequence} not acked in {deadline_s} s: {last}")


def pop_all(cluster: Cluster, consumer_id: str, batch: int = 500) -> list[dict[str, Any]]:
    """Pop until a pop returns nothing; each pop is retried with its own request id."""
    popped: list[dict[str, Any]] = []
    for number in range(100_000):
        messages = pop(cluster, consumer_id, batch, f"{consumer_id}-r{number}")
        if not messages:
            return popped
        popped.extend(messages)
    raise AssertionError("pop_all did not finish")


def pop(
    cluster: Cluster, consumer_id: str, max_messages: int, request_id: str, deadline_s: float = 30
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + deadline_s
    while True:
        response = cluster.get(
            "/logs", consumer_id=consumer_id, max_messages=max_messages, request_id=request_id
        )
        if response.status_code == 200:
            result: list[dict[str, Any]] = response.json()["messages"]
            return result
        if response.status_code not in RETRY_STATUSES or time.monotonic() > deadline:
            raise AssertionError(f"pop failed: {response.status_code} {response.text}")
        time.sleep(0.1)


def read_replica(cluster: Cluster, broker_id: int, topic: str, partition_id: int) -> list[Entry]:
    """Every message of a partition as one replica's broker serves it."""
    return list(
        final_read.read_replica(
            cluster.local, cluster.http, cluster.broker_name(broker_id), topic, partition_id
        )
    )


def partition_brokers(cluster: Cluster, topic: str, wait_s: float = 60.0) -> dict[int, list[int]]:
    """partition id → broker ids of its replicas; asked again (bounded) while the managers
    answer no list (right after a restart of every node they may have no leader yet: the
    power-loss test's CI run once met a 503 here)."""

    def listed() -> dict[str, Any] | None:
        response = cluster.get("/partitions", topic=topic)
        return response.json() if response.status_code == 200 else None

    body = poll_until(listed, wait_s, f"the partitions of {topic}")
    return {p["partition_id"]: [r["broker_id"] for r in p["replicas"]] for p in body["partitions"]}


def partition_leader(cluster: Cluster, topic: str, partition_id: int) -> int:
    """Broker id whose replica of the partition is the Raft leader (asked of the brokers)."""
    leader = cluster_view.partition_leader(cluster.local, cluster.http, topic, partition_id)
    if leader is None:
        raise AssertionError(f"{topic}/{partition_id} has no leader")
    return int(leader.removeprefix("broker-"))


def checksums(
    cluster: Cluster, topic: str, partition_id: int, end: int
) -> dict[int, tuple[int, str, int]]:
    """broker id → (row count, sha256, flushed offset) of its database for ``[0, end)``."""
    result = {}
    for broker_id in partition_brokers(cluster, topic)[partition_id]:
        body = cluster.internal.get(
            f"{cluster.broker_url(broker_id)}/checksum",
            params={
                "topic": topic,
                "partition_id": str(partition_id),
                "start": "0",
                "end": str(end),
            },
            timeout=10,
        ).json()
        result[broker_id] = (body["count"], body["sha256"], body["flushed_offset"])
    return result


def end_offset(cluster: Cluster, topic: str, partition_id: int) -> int:
    """The partition's end offset as its leader's broker reports it."""
    leader = cluster.broker_name(partition_leader(cluster, topic, partition_id))
    status = cluster_view.replica_status(cluster.local, cluster.http, topic, partition_id)
    return int(status[leader]["end_offset"])


def create_topic(cluster: Cluster, name: str, partitions: int = 1, wait_s: float = 60.0) -> None:
    """Create a topic through the LB, retrying while the cluster is not ready (503: no
    manager leader yet, a broker not registered yet; 409 after a retry: an earlier attempt
    created it), then wait until each partition has a Raft leader."""

    def created() -> bool | None:
        response = cluster.post("/topics", {"name": name, "partitions": partitions})
        if response.status_code in (429, 503):
            return None
        assert response.status_code in (201, 409), response.text
        return True

    poll_until(created, wait_s, f"topic {name} to be created")
    for partition_id in range(partitions):
        poll_until(_has_leader(cluster, name, partition_id), wait_s, f"{name}/{partition_id}")


def create_topic_answer(
    cluster: Cluster, body: dict[str, Any], wait_s: float = 60.0
) -> dict[str, Any]:
    """``POST /topics`` through the LB as a careful client does it: repeated while refused
    (``post_when_ready``); an answer whose outcome is unknown (503 UNAVAILABLE: say the
    manager leader changed after recording the topic, which is then finished in the
    background) is followed by waiting (bounded) until the topic is active, and its
    partitions are answered as a 201 would have. Any other answer fails the test."""
    name = str(body["name"])
    response = post_when_ready(cluster, "/topics", body, wait_s)
    if response.status_code == 201:
        created: dict[str, Any] = response.json()
        return created
    error = response.json() if response.status_code == 503 else None
    assert error is not None and not proves_nothing_done(503, error), response.text

    def active() -> dict[str, Any] | None:
        partitions = cluster.get("/partitions", topic=name)
        if partitions.status_code != 200:
            return None
        items = partitions.json()["partitions"]
        if any(p["state"] != "active" for p in items):
            return None
        return {
            "name": name,
            "partitions": [
                {
                    "partition_id": p["partition_id"],
                    "replicas": [r["broker_id"] for r in p["replicas"]],
                    "leader": p["leader"],
                }
                for p in items
            ],
        }

    return poll_until(active, wait_s, f"topic {name} to be finished in the background")


def register_producer(
    cluster: Cluster, topic: str, producer_id: str | None = None, wait_s: float = 60.0
) -> str:
    """``POST /producers`` (a client-chosen id, or the manager's), retried on 503/429."""
    body: dict[str, object] = {"topic": topic}
    if producer_id is not None:
        body["producer_id"] = producer_id

    def registered() -> str | None:
        response = cluster.post("/producers", body)
        if response.status_code in (429, 503):
            return None
        assert response.status_code in (200, 201), response.text
        found: str = response.json()["producer_id"]
        return found

    return poll_until(registered, wait_s, f"a producer of {topic}")


def _has_leader(cluster: Cluster, topic: str, partition_id: int) -> Callable[[], bool]:
    def check() -> bool:
        leader = cluster_view.partition_leader(cluster.local, cluster.http, topic, partition_id)
        return leader is not None

    return check


def post_when_ready(
    cluster: Cluster, path: str, body: dict[str, Any], wait_s: float = 60.0
) -> requests.Response:
    """``POST`` through the LB, repeated (bounded) while the answer is a temporary refusal
    that proves nothing was done (429, or a 503 such as NO_LEADER or REFUSED while a manager
    leader settles on a loaded machine); any other answer is returned, so a test still sees
    its 201, 409 or 400, and a request whose outcome is open is never repeated."""

    def answered() -> requests.Response | None:
        response = cluster.post(path, body)
        try:
            error: object = response.json()
        except ValueError:
            error = None
        temporary = response.status_code in (429, 503)
        if temporary and proves_nothing_done(response.status_code, error):
            return None
        return response

    return poll_until(answered, wait_s, f"POST {path} to be answered")


def register_consumer(
    cluster: Cluster, topic: str, partition_id: int | None = None, wait_s: float = 60.0
) -> str:
    """``POST /consumers`` (the manager chooses the id), repeated while refused."""
    body: dict[str, Any] = {"topic": topic}
    if partition_id is not None:
        body["partition_id"] = partition_id
    response = post_when_ready(cluster, "/consumers", body, wait_s)
    assert response.status_code == 201, response.text
    found: str = response.json()["consumer_id"]
    return found


def register(cluster: Cluster, kind: str, body: dict[str, Any]) -> str:
    """``POST /producers`` or ``/consumers`` (``kind``): the new id."""
    response = post_when_ready(cluster, f"/{kind}s", body)
    assert response.status_code == 201, response.text
    return str(response.json()[f"{kind}_id"])


def headers_of_index(index: int) -> dict[str, str]:
    """Every third message has headers, one with characters JSON and the database escape."""
    return {"n": str(index), "odd\tname": "line\nbreak"} if index % 3 == 0 else {}
