"""Issue 2's "done means", with real processes through the load balancer, on SQLite and on
PostgreSQL: produce and pop 10,000 keyed messages exactly once and in order; retries that do
not duplicate; bad input that changes nothing; kill -9 of a partition leader while producing;
kill -9 of the manager leader; the whole cluster down and up again (headers kept). The
consumer groups' are in `test_groups_end_to_end.py`."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from protocol.limits import Limits
from unit_tests.cluster.client_ops import (
    Ack,
    checksums,
    create_topic,
    create_topic_answer,
    end_offset,
    headers_of_index,
    partition_leader,
    pop,
    pop_all,
    post_when_ready,
    produce,
    read_replica,
    register,
)
from unit_tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

LIMITS = Limits()
"""The cluster's: it runs with the defaults."""
SLOW_CLIENT_WAIT_S = 20.0
SENDER_STOP_WAIT_S = 70.0
"""How long a sender thread may take to notice ``stop``: its ``produce`` call retries for
30 s (its ``deadline_s``), and the last try may wait out a request's 30 s timeout."""


def test_topics_are_created_on_three_distinct_brokers(cluster: Cluster) -> None:
    body = create_topic_answer(cluster, {"name": "placed", "partitions": 3})
    assert body["name"] == "placed"
    assert [p["partition_id"] for p in body["partitions"]] == [0, 1, 2]
    for partition in body["partitions"]:
        assert sorted(partition["replicas"]) == [1, 2, 3]
    again = post_when_ready(cluster, "/topics", {"name": "placed", "partitions": 1})
    assert again.status_code == 409, again.text
    listed = cluster.get("/topics").json()["topics"]
    assert {"name": "placed", "partitions": 3, "active_partitions": 3} in listed
    brokers = cluster.get("/brokers").json()["brokers"]
    assert sorted(b["broker_id"] for b in brokers if b["alive"]) == [1, 2, 3]


def test_ten_thousand_keyed_messages_are_popped_exactly_once_in_order(cluster: Cluster) -> None:
    create_topic(cluster, "orders", 3)
    producer = register(cluster, "producer", {"topic": "orders"})
    acks: list[Ack] = []
    for sequence in range(100):
        batch = [(f"key-{(sequence * 100 + i) % 37}", f"m{sequence * 100 + i}") for i in range(100)]
        acks += produce(cluster, producer, sequence, batch, topic="orders")
    assert len(acks) == 10_000

    key_partition: dict[str | None, int] = {}
    for ack in acks:  # a key always lands in the same partition
        assert key_partition.setdefault(ack.key, ack.partition_id) == ack.partition_id
    assert len(set(key_partition.values())) == 3

    consumer = register(cluster, "consumer", {"topic": "orders"})
    popped = pop_all(cluster, consumer)
    values = [m["message"] for m in popped]
    assert sorted(values) == sorted(a.value for a in acks)  # each exactly once
    acked_at = {a.value: (a.partition_id, a.offset) for a in acks}
    by_partition: dict[int, list[int]] = defaultdict(list)
    for message in popped:
        assert acked_at[message["message"]] == (message["partition_id"], message["offset"])
        by_partition[message["partition_id"]].append(message["offset"])
    for offsets in by_partition.values():  # contiguous from 0 and in order
        assert offsets == list(range(len(offsets)))


def test_retried_batch_and_retried_pop_do_not_duplicate(cluster: Cluster) -> None:
    create_topic(cluster, "retries", 1)
    producer = register(cluster, "producer", {"topic": "retries"})
    batch = [(None, f"r{i}") for i in range(10)]
    first = produce(cluster, producer, 7, batch, topic="retries")
    again = produce(cluster, producer, 7, batch, topic="retries")
    assert first == again
    assert end_offset(cluster, "retries", 0) == 10

    consumer = register(cluster, "consumer", {"topic": "retries"})
    one = pop(cluster, consumer, 4, "req-1")
    assert pop(cluster, consumer, 4, "req-1") == one
    two = pop(cluster, consumer, 100, "req-2")
    assert [m["offset"] for m in one + two] == list(range(10))


def test_bad_input_gets_a_clear_error_and_changes_nothing(cluster: Cluster) -> None:
    create_topic(cluster, "strict", 1)
    producer = register(cluster, "producer", {"topic": "strict"})
    produce(cluster, producer, 0, [(None, "kept")], topic="strict")
    topics_before = cluster.get("/topics").json()
    cases = [
        ("/logs", {"producer_id": "nobody", "topic": "strict", "message": "x"}, 404),
        ("/logs", {"producer_id": producer, "topic": "nope", "message": "x"}, 400),
        ("/producers", {"topic": "nope"}, 404),
        ("/logs", {"producer_id": producer, "topic": "strict", "message": 5}, 400),
        ("/logs", {"producer_id": producer, "topic": "strict", "message": "x" * 2_000_000}, 413),
        (
            "/logs",
            {"producer_id": producer, "topic": "strict", "message": "x", "partition_id": 9},
            404,
        ),
        (
            "/logs",
            {
                "producer_id": producer,
                "topic": "strict",
                "messages": [{"message": "x"}] * (LIMITS.request_messages_max + 1),
            },
            413,
        ),
        (
            "/logs",
            {"producer_id": producer, "topic": "strict", "message": "x", "key": "k" * 2_000},
            413,
        ),
        ("/topics", {"name": "bad name!"}, 400),
        ("/topics", {"name": "../etc"}, 400),
        ("/topics", {"name": "a/b"}, 400),
        ("/topics", {"name": "t" * (LIMITS.topic_name_chars_max + 1)}, 400),
        ("/topics", {"name": "t2", "partitions": 0}, 400),
        ("/topics", {"name": "t2", "partitions": "3"}, 400),
        ("/consumers", {"topic": "nope"}, 404),
    ]
    for path, body, status in cases:
        response = cluster.post(path, body)
        assert response.status_code == status, (path, body, response.text)
        error = response.json()
        assert error["error_code"] // 100 == status and error["message"]
    raw = cluster.http.post(
        f"{cluster.lb_url}/logs",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert raw.status_code == 400
    assert cluster.get("/logs", consumer_id="nobody").status_code == 404
    # Asked of the leader, which knows the end (a follower answers what it has: it may lag).
    leader_url = cluster.broker_url(partition_leader(cluster, "strict", 0))
    query = "topic=strict&partition_id=0&offset=5&max_messages=10"
    beyond = cluster.http.get(f"{leader_url}/logs?{query}", timeout=10)
    assert beyond.status_code == 416 and "0 to 1" in beyond.json()["message"], beyond.text
    assert end_offset(cluster, "strict", 0) == 1
    assert cluster.get("/topics").json() == topics_before


def test_a_client_that_trickles_its_request_is_cut_off(cluster: Cluster) -> None:
    """A slowloris client holds one connection thread for ``http_request_read_timeout_s``
    at most, gets 408, and nobody else waits meanwhile."""
    host, port = cluster.lb_url.removeprefix("http://").split(":")
    started_s = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=SLOW_CLIENT_WAIT_S) as slow:
        slow.sendall(b"POST /topics HTTP/1.1\r\nHost: x\r\n")
        answer = b""
        while not answer:
            assert cluster.get("/topics").status_code == 200  # others are served meanwhile
            slow.sendall(b"X")  # a byte of a header that never ends
            ready, _, _ = select.select([slow], [], [], 1.0)
            if ready:
                answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
    elapsed_s = time.monotonic() - started_s
    assert elapsed_s < LIMITS.http_request_read_timeout_s + SLOW_CLIENT_WAIT_S, elapsed_s


def test_kill_partition_leader_while_producing(cluster: Cluster) -> None:
    create_topic(cluster, "crash", 1)
    producer = register(cluster, "producer", {"topic": "crash"})
    acks: list[Ack] = []
    ack_times: list[float] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def send() -> None:
        sequence = 0
        try:
            while not stop.is_set():
                batch = [(None, f"c{sequence}-{i}") for i in range(20)]
                acks.extend(produce(cluster, producer, sequence, batch, topic="crash"))
                ack_times.append(time.monotonic())
                sequence += 1
        except BaseException as exc:
            errors.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        wait_until(lambda: len(acks) >= 200, 30, "first acks")
        victim = partition_leader(cluster, "crash", 0)
        killed_at = time.monotonic()
        cluster.kill(cluster.broker_name(victim))
        wait_until(lambda: ack_times and ack_times[-1] > killed_at + 0.5, 15, "writes to resume")
        resumed_s = min(t for t in ack_times if t > killed_at) - killed_at
        time.sleep(1)
    finally:
        stop.set()
        sender.join(SENDER_STOP_WAIT_S)
    assert not sender.is_alive(), "the sender hung"
    assert not errors, errors
    assert resumed_s < 10, f"writes resumed only after {resumed_s:.1f} s"

    cluster.up()  # restarts the killed broker with its data
    end = len(acks)
    assert end_offset(cluster, "crash", 0) == end  # nothing acked twice, nothing lost
    wait_until(
        lambda: len({(c, s) for c, s, _ in checksums(cluster, "crash", 0, end).values()}) == 1
        and all(f >= end for _, _, f in checksums(cluster, "crash", 0, end).values()),
        60,
        "every replica's database to hold the same messages",
    )
    for broker_id in (1, 2, 3):
        stored = read_replica(cluster, broker_id, "crash", 0)
        assert [(m.offset, m.value) for m in stored] == [(a.offset, a.value) for a in acks]


def test_kill_manager_leader_and_the_load_balancer_follows(cluster: Cluster) -> None:
    create_topic(cluster, "managed", 1)
    leader = cluster.manager_leader()
    killed_at = time.monotonic()
    cluster.kill(leader)

    def works() -> bool:
        return cluster.post("/producers", {"topic": "managed"}).status_code == 201

    wait_until(works, 20, "requests through the load balancer to succeed again")
    recovered_s = time.monotonic() - killed_at
    assert recovered_s < 10, f"managers recovered only after {recovered_s:.1f} s"
    assert cluster.manager_leader() != leader
    cluster.up()
    wait_until(lambda: cluster.status(), 30, "status")


def test_cluster_down_and_up_keeps_messages_and_consumer_offsets(cluster: Cluster) -> None:
    """Also message headers: kept in the Raft log, the database and the journal replay."""
    create_topic(cluster, "durable", 2)
    producer = register(cluster, "producer", {"topic": "durable"})
    batch = [(f"k{i}", f"d{i}") for i in range(300)]
    acks = produce(cluster, producer, 0, batch, topic="durable", headers=headers_of_index)
    consumer = register(cluster, "consumer", {"topic": "durable"})
    first = pop(cluster, consumer, 100, "before-restart")
    assert len(first) == 100

    cluster.down()
    cluster.up()

    rest: list[dict[str, Any]] = wait_until(
        lambda: pop_all(cluster, consumer) or None, 60, "pops after restart"
    )
    assert sorted(m["message"] for m in first + rest) == sorted(a.value for a in acks)
    assert {m["message"]: m["headers"] for m in first + rest} == {
        value: headers_of_index(i) for i, (_, value) in enumerate(batch)
    }
    # The producer's sequence survived too: a retry of batch 0 is still recognised.
    again = produce(cluster, producer, 0, batch, topic="durable", headers=headers_of_index)
    assert again == acks
