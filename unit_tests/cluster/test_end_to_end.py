"""Issue 2's "done means", with real processes through the load balancer, on SQLite and on
PostgreSQL: produce and pop 10,000 keyed messages exactly once and in order; retries that do
not duplicate; bad input that changes nothing; kill -9 of a partition leader while producing;
kill -9 of the manager leader; the whole cluster down and up again."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import defaultdict
from typing import Any

import pytest

from protocol.limits import Limits
from raftq import Admin, Delivery, GroupMember
from unit_tests.cluster.client_ops import (
    Ack,
    checksums,
    create_topic_answer,
    end_offset,
    partition_leader,
    pop,
    pop_all,
    post_when_ready,
    produce,
    read_replica,
)
from unit_tests.cluster.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster

LIMITS = Limits()
"""The cluster's: it runs with the defaults."""
SLOW_CLIENT_WAIT_S = 20.0
SENDER_STOP_WAIT_S = 70.0
"""How long a sender thread may take to notice ``stop``: its ``produce`` call retries for
30 s (its ``deadline_s``), and the last try may wait out a request's 30 s timeout."""


def create_topic(cluster: Cluster, name: str, partitions: int) -> dict[str, Any]:
    return create_topic_answer(cluster, {"name": name, "partitions": partitions})


def register(cluster: Cluster, kind: str, body: dict[str, Any]) -> str:
    response = post_when_ready(cluster, f"/{kind}s", body)
    assert response.status_code == 201, response.text
    return str(response.json()[f"{kind}_id"])


def test_topics_are_created_on_three_distinct_brokers(cluster: Cluster) -> None:
    body = create_topic(cluster, "placed", 3)
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


def headers_of_index(index: int) -> dict[str, str]:
    """Every third message has headers, one with characters JSON and the database escape."""
    return {"n": str(index), "odd\tname": "line\nbreak"} if index % 3 == 0 else {}


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


GROUP_VISIBILITY_MS = 1_500
REDELIVERY_WAIT_S = 30.0
"""A lease that ended is handed out again once its visibility timeout has passed: well
within this, even across the partition leader's failover."""


def test_a_group_leases_acks_and_redelivers_across_a_leader_kill(cluster: Cluster) -> None:
    """Consumer groups with leased delivery (issue 20), on the direct path with the load
    balancer to fall back on: a member
    acks some deliveries, nacks some, and holds two whose leases end; the leader of one
    partition is killed; another member then gets every message not acked, none acked
    before, the nacked and expired ones on a later delivery. The first member's late acks
    of its expired leases settle nothing."""
    create_topic(cluster, "leased", 2)
    with Admin(cluster.lb_url, api_key=cluster.admin_key) as admin:
        group = admin.create_group("leased", "workers", visibility_timeout_ms=GROUP_VISIBILITY_MS)
        assert (
            admin.create_group("leased", "workers", visibility_timeout_ms=GROUP_VISIBILITY_MS)
            == group
        )
        known = [(g.group, g.visibility_timeout_ms, g.lag_messages) for g in admin.groups("leased")]
        assert known == [(group.group, GROUP_VISIBILITY_MS, 0)]
    producer = register(cluster, "producer", {"topic": "leased"})
    acks = produce(cluster, producer, 0, [(f"k{i}", f"g{i}") for i in range(40)], topic="leased")
    everything = {(a.partition_id, a.offset) for a in acks}
    key = cluster.admin_key
    with (
        GroupMember(cluster.lb_url, "leased", "workers", api_key=key) as first,
        GroupMember(cluster.lb_url, "leased", "workers", api_key=key) as second,
    ):
        held = first.receive(10)
        assert len(held) == 10 and all(d.delivery_count == 1 for d in held)
        assert [o for _, o in first.ack(held[:6])] == ["done"] * 6
        assert [o for _, o in first.nack(held[6:8])] == ["done"] * 2
        cluster.kill(cluster.broker_name(partition_leader(cluster, "leased", 0)))
        try:
            _take_the_rest(first, second, held, everything)
        finally:
            cluster.up()  # the killed broker comes back, whatever happened

    def settled_everywhere() -> bool:
        body = cluster.get("/groups", topic="leased").json()
        (figures,) = body["groups"]
        answered = body["unavailable_partitions"] == []
        return answered and (figures["lag_messages"], figures["in_flight"]) == (0, 0)

    wait_until(settled_everywhere, 30, "the group's figures to show nothing left")
    where = ("--dir", str(cluster.directory))
    listed = cluster.cli("group", "list", "--topic", "leased", *where)
    assert "workers" in listed and f"visibility {GROUP_VISIBILITY_MS} ms" in listed
    assert "lag 0 " in listed and "in flight 0" in listed
    assert cluster.cli("receive", "--topic", "leased", "--group", "workers", *where) == ""


def _take_the_rest(
    first: GroupMember,
    second: GroupMember,
    held: list[Delivery],
    everything: set[tuple[int, int]],
) -> None:
    """The second member gets every message the first did not ack, none acked before; the
    first member's late acks of its expired leases settle nothing. (Whether the second
    went direct depends on where leadership went after the kill: the long-poll test checks
    the direct path without a fault.)"""
    acked = {_where(d) for d in held[:6]}
    counts: dict[tuple[int, int], list[int]] = defaultdict(list)

    def took_the_rest() -> bool:
        for delivery in second.receive(20):
            assert _where(delivery) not in acked, f"{delivery} was acked before"
            counts[_where(delivery)].append(delivery.delivery_count)
            assert [o for _, o in second.ack([delivery])] == ["done"]
            acked.add(_where(delivery))
        return acked == everything

    wait_until(took_the_rest, REDELIVERY_WAIT_S, "every message acked", period_s=0.2)
    # Each message the second member got came once (it acked at once); the nacked and
    # expired ones on a later delivery. (A receive whose answer was lost in the failover
    # leaves leases that end: those messages come with one delivery more.)
    again = {_where(d) for d in held[6:]}
    assert all(len(found) == 1 for found in counts.values()), counts
    assert all(counts[where][0] >= 2 for where in again), counts
    late = {outcome for _, outcome in first.ack(held[8:])}
    assert late <= {"stale", "already"}, late


def _where(delivery: Delivery) -> tuple[int, int]:
    return delivery.record.partition_id, delivery.record.offset


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "via-lb"])
def test_a_long_poll_returns_when_a_message_arrives(cluster: Cluster, direct: bool) -> None:
    """``wait_ms``: a receive of an empty group waits, and answers as soon as a message
    is produced (each ask that found nothing cost the partition no Raft entry)."""
    topic, key = f"polled-{int(direct)}", cluster.admin_key
    create_topic(cluster, topic, 2)
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group(topic, "waiters")
    producer = register(cluster, "producer", {"topic": topic})
    with GroupMember(cluster.lb_url, topic, "waiters", api_key=key, direct=direct) as member:
        assert member.receive(1) == []
        started = time.monotonic()
        assert member.receive(1, wait_ms=300) == []
        assert time.monotonic() - started >= 0.3
        timer = threading.Timer(
            1.0, lambda: produce(cluster, producer, 0, [(None, "late")], topic=topic)
        )
        timer.start()
        try:
            started = time.monotonic()
            got = member.receive(1, wait_ms=4_000)
            waited_s = time.monotonic() - started
        finally:
            timer.join()
        assert [d.record.value for d in got] == ["late"]
        assert 0.9 <= waited_s < 3.5, waited_s


POISON_COUNT = 24
DEAD_LETTER_WAIT_S = 60.0
"""Dead letters move each reconcile round (0.5 s); this also covers a manager failover."""


def test_poison_messages_reach_the_dead_letter_topic_once_across_a_manager_kill(
    cluster: Cluster,
) -> None:
    """Issue 20's dead-letter step with real processes: messages nacked ``max_deliveries``
    times go to the group's dead-letter topic with their key, value and headers and
    RaftQ's own headers naming where they came from; the manager leader is killed while
    the step runs, and its successor repeats it: each dead letter is stored exactly once,
    and the group counts it dead-lettered."""
    create_topic(cluster, "poisoned", 2)
    create_topic(cluster, "poisoned-dead", 2)
    key = cluster.admin_key
    with Admin(cluster.lb_url, api_key=key) as admin:
        admin.create_group(
            "poisoned", "workers", max_deliveries=2, dead_letter_topic="poisoned-dead"
        )
    producer = register(cluster, "producer", {"topic": "poisoned"})
    batch = [(f"k{i % 5}", f"p{i}") for i in range(POISON_COUNT)]
    acks = produce(cluster, producer, 0, batch, topic="poisoned", headers=headers_of_index)
    origin = {(a.partition_id, a.offset): a for a in acks}
    with GroupMember(cluster.lb_url, "poisoned", "workers", api_key=key) as member:
        for _ in range(2):  # max_deliveries: each nack of the second delivery kills it
            held = _receive_all(member, POISON_COUNT)
            # ``ended``: a nack applied, then repeated once its answer was lost (the
            # leaders move after the cluster's restart by the test before).
            assert {o for _, o in member.nack(held)} <= {"done", "ended"}
    cluster.kill(cluster.manager_leader())
    try:
        copies = _dead_letters_when_all_moved(cluster)
    finally:
        cluster.up()
    seen = [
        (int(m["headers"]["raftq-origin-partition"]), int(m["headers"]["raftq-origin-offset"]))
        for m in copies
    ]
    assert sorted(seen) == sorted(origin), "each dead letter exactly once"
    for message in copies:
        where = (
            int(message["headers"]["raftq-origin-partition"]),
            int(message["headers"]["raftq-origin-offset"]),
        )
        index = int(origin[where].value[1:])
        assert (message["key"], message["message"]) == (origin[where].key, origin[where].value)
        own = {n: v for n, v in message["headers"].items() if not n.startswith("raftq-")}
        assert own == headers_of_index(index)
        assert message["headers"]["raftq-group"] == "workers"
        assert message["headers"]["raftq-origin-topic"] == "poisoned"
        assert message["headers"]["raftq-delivery-count"] == "2"
        assert message["headers"]["raftq-reason"] == "max_deliveries"


def _receive_all(member: GroupMember, count: int) -> list[Delivery]:
    held: list[Delivery] = []

    def all_held() -> bool:
        held.extend(member.receive(count - len(held)))
        return len(held) == count

    wait_until(all_held, 30, "every message delivered", period_s=0.1)
    return held


def _dead_letters_when_all_moved(cluster: Cluster) -> list[dict[str, Any]]:
    def figures() -> dict[str, Any] | None:
        body = cluster.get("/groups", topic="poisoned").json()
        if body.get("unavailable_partitions") != []:
            return None
        (group,) = body["groups"]
        moved = (group["dead_lettered"], group["dead_letters_pending"], group["lag_messages"])
        return group if moved == (POISON_COUNT, 0, 0) else None

    wait_until(figures, DEAD_LETTER_WAIT_S, "every dead letter moved and counted")
    copies: list[dict[str, Any]] = []
    for partition_id in (0, 1):
        response = cluster.get(
            "/logs", topic="poisoned-dead", partition_id=partition_id, offset=0, max_messages=100
        )
        assert response.status_code == 200, response.text
        copies.extend(response.json()["messages"])
    return copies
